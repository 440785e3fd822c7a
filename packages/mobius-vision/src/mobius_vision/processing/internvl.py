"""InternVL's images: GOT-OCR2 tiles (always cropped, as InternVLProcessor asks), and
``image_seq_length`` context tokens per tile between ``<img>`` and ``</img>``."""

from __future__ import annotations

from mobius_vision.processing._image import integer
from mobius_vision.processing._tiles import TiledProcessor


class InternVLProcessor(TiledProcessor):
    """InternVLProcessor: the placeholder is the tokenizer's context image token."""

    @property
    def image_token(self) -> str:
        return self.token_text("context_image_token", "<IMG_CONTEXT>")

    @property
    def image_seq_length(self) -> int:
        """Context tokens per tile: the processor's setting, else the tower's patches after
        the pixel shuffle (``downsample_ratio``)."""
        size = self.config_value("image_size", 448, section="vision_config")
        patch = self.config_value("patch_size", 14, section="vision_config")
        size = size[0] if isinstance(size, list) else size
        patch = patch[0] if isinstance(patch, list) else patch
        ratio = self.config_value("downsample_ratio", 0.5)
        default = int((size // patch * ratio) ** 2)
        return integer(self.settings.processor, "image_seq_length", default, 1, 1 << 16)

    def expansion(self, tiles: int) -> str:
        start = self.token_text("start_image_token", "<img>")
        end = self.token_text("end_image_token", "</img>")
        return start + self.image_token * self.image_seq_length * tiles + end
