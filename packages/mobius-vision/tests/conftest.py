"""Fixtures shared by mobius-vision's generate tests."""

from __future__ import annotations

import pytest
from _vl_built import random_image


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    """A wide random PNG (37x45), the image the generate checks feed the CLI."""
    from PIL import Image

    path = tmp_path_factory.mktemp("images") / "wide.png"
    Image.fromarray(random_image((37, 45), seed=1)).save(path)
    return path
