"""``mobius detect`` on the deformable detectors matches transformers' pipeline.

A tiny random RT-DETR and D-FINE (every parameter perturbed) are saved with RT-DETR's image
processor (transformers' PIL backend, a fixed resize, with and without normalisation) and
built once with the CLI. ``mobius detect`` must print what transformers' ``object-detection`` pipeline finds:
the same labels in the same order, scores within 1e-5, corners within 1e-3 px of the
processor's ``post_process_object_detection`` (sigmoid, as many (query, class) pairs as
queries). The checks are test_detection_detect.py's.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_detection_detect as detect
import transformers
from detection_parity_cases.d_fine import TINY_D_FINE
from detection_parity_cases.rt_detr import TINY_RT_DETR
from test_detection_detect import (
    built,  # noqa: F401  (a fixture: built(case) over detect.DETECTORS)
    images,  # noqa: F401  (a fixture: the test images)
)

from mobius_vision.processing import detection as processing

FIXED_SIZE = {"height": 64, "width": 64}

#: case -> (model_type, config, image processor), added to test_detection_detect's table.
DEFORMABLE_DETECTORS = {
    "rt_detr": (
        "rt_detr",
        # wider weights: transformers' tiny init scores every pair alike
        dict(TINY_RT_DETR, initializer_range=1.0),
        lambda: transformers.RTDetrImageProcessorPil(size=FIXED_SIZE),
    ),
    # D-FINE's checkpoints name RT-DETR's image processor
    "d_fine": (
        "d_fine",
        TINY_D_FINE,
        lambda: transformers.RTDetrImageProcessorPil(size=FIXED_SIZE, do_normalize=True),
    ),
}
detect.DETECTORS.update(DEFORMABLE_DETECTORS)


@pytest.mark.parametrize("case", sorted(DEFORMABLE_DETECTORS))
def test_deformable_detect_matches_the_pipeline(case, built, images, capsys, tmp_path):  # noqa: F811
    detect.test_detect_matches_the_pipeline(case, built, images, capsys, tmp_path)


def test_rt_detr_pixels_match_the_processor(images):  # noqa: F811
    """The pixels equal transformers' RT-DETR PIL processor's, exactly: its defaults (640 x 640,
    not normalised) and a normalised fixed size."""
    image = transformers.image_utils.load_image(images[0])
    for settings in ({}, {"size": FIXED_SIZE, "do_normalize": True}):
        theirs = transformers.RTDetrImageProcessorPil(**settings)(image)
        raw = {"image_processor_type": "RTDetrImageProcessorPil", **settings}
        pre, _ = processing.detection_processing(raw)
        pixels, _ = pre(np.moveaxis(np.asarray(image), -1, 0))
        np.testing.assert_array_equal(pixels, theirs["pixel_values"][0], err_msg=str(settings))
