"""GLM-GA images: GLM-4.1V's (:mod:`.glm4v`), resized to multiples of a larger block where
the settings name a ``patch_expand_factor``.

transformers' ``GlmgaImageProcessor`` (its default, torchvision backend) resizes each image
to multiples of ``patch_size * merge_size * patch_expand_factor``; everything after the
resize (patches, grids, placeholders, positions) is GLM-4.1V's. Its PIL backend does not
read the factor; with the default factor, 1, the two agree.
"""

from __future__ import annotations

from mobius_vision.processing._image import integer
from mobius_vision.processing.glm4v import Glm4vProcessor, glm4v_smart_resize


class GlmgaProcessor(Glm4vProcessor):
    """``Glm46VProcessor`` over ``GlmgaImageProcessor``: see the module docstring."""

    @property
    def patch_expand_factor(self) -> int:
        return integer(self.settings.image, "patch_expand_factor", 1, 1, 64)

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        factor = self.patch_size * self.merge_size * self.patch_expand_factor
        frames = self.temporal_patch_size
        return glm4v_smart_resize(height, width, factor, frames, *self.pixel_bounds)
