"""LightOnOCR's images: Pixtral's resizing and padding, one run of image tokens per image.

``LightOnOcrProcessor`` differs from ``PixtralProcessor`` in two ways: it does not hand
its image processor the merged patch, so images are resized to multiples of the image
processor's own ``patch_size``; and an image's placeholder becomes one image token per
merged patch (``patch_size * spatial_merge_size`` pixels a side, floored), with no row
breaks and no end token. The placeholder is the tokenizer's ``image_token``
(``<|image_pad|>`` on the hub).
"""

from __future__ import annotations

from mobius.errors import MobiusError
from mobius_vision.processing._image import integer
from mobius_vision.processing.pixtral import PixtralProcessor

#: PixtralImageProcessor's default ``patch_size``.
DEFAULT_IMAGE_PATCH = 16


class LightOnOcrProcessor(PixtralProcessor):
    """LightOnOcrProcessor (lighton_ocr): Pixtral's images, ``image_token`` runs without breaks."""

    @property
    def image_token(self) -> str:
        return self.token_text("image_token", "<|image_pad|>")

    @property
    def resize_block(self) -> int:
        """The image processor's ``patch_size`` (an int, or a square ``{height, width}``)."""
        patch = self.image.raw.get("patch_size", DEFAULT_IMAGE_PATCH)
        if isinstance(patch, dict):
            sides = {patch.get("height"), patch.get("width")}
            if len(sides) != 1:
                raise MobiusError(f"preprocessor setting patch_size is not square: {patch}")
            patch = sides.pop()
        return integer({"patch_size": patch}, "patch_size", DEFAULT_IMAGE_PATCH, 1, 1 << 12)

    def image_text(self, height: int, width: int) -> str:
        return self.image_token * ((height // self.block) * (width // self.block))
