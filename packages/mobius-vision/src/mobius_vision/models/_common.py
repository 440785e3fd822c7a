"""What several vision families share: the prefix of a bare checkpoint, a tower as a build.

transformers saves a bare backbone (``ViTModel``, ``ResNetModel``, ``SiglipVisionModel``...)
without the prefix its ``For*`` class puts before it (``vit.``, ``resnet.``,
``vision_model.``); mobius builds one module tree for both, so a bare checkpoint's
names get the prefix.
"""

from __future__ import annotations

from typing import Any

from mobius.model import Model


def prefix_bare_names(
    weights: dict[str, Any], prefix: str, keep: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``weights`` with ``prefix`` put before every name that starts with neither it nor ``keep``.

    ``keep`` names the heads that sit beside the backbone (``classifier``...), whose
    names a checkpoint of the whole model already has right.
    """
    return {k if k.startswith((prefix, *keep)) else prefix + k: v for k, v in weights.items()}


class VisionTowerModel(Model):
    """A vision–language model's tower as a build of its own: ``vision_model`` (``tower_class``).

    A checkpoint of the bare tower gets the ``vision_model.`` prefix; names under
    ``head_prefixes`` (a head beside the tower) keep theirs.
    """

    task = "image-classification"
    tower_class: type
    head_prefixes: tuple[str, ...] = ()

    def __init__(self, config) -> None:
        super().__init__()
        config.require_no_head()
        self.config = config
        self.vision_model = self.tower_class(config)

    def sanitize(self, weights: dict) -> dict:
        """A bare tower's checkpoint gets the ``vision_model.`` prefix."""
        return prefix_bare_names(weights, "vision_model.", self.head_prefixes)


def torch_bicubic_resize(op, x, sizes):
    """``x`` [n, c, h, w] resized to ``sizes`` (a 4-element int64 value) as PyTorch's
    ``interpolate(mode="bicubic", align_corners=False)`` does without antialiasing (cubic
    coefficient -0.75, half-pixel centres): how transformers resamples position tables."""
    return op.Resize(
        x,
        None,
        None,
        sizes,
        mode="cubic",
        cubic_coeff_a=-0.75,
        coordinate_transformation_mode="half_pixel",
    )
