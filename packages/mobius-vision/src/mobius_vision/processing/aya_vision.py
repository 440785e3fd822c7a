"""Aya Vision's images: GOT-OCR2 tiles, each tile's tokens after a ``TILE_i`` marker (the
thumbnail's after ``TILE_GLOBAL``), between ``<|START_OF_IMG|>`` and ``<|END_OF_IMG|>``."""

from __future__ import annotations

from mobius_vision.processing._image import integer
from mobius_vision.processing._tiles import TiledProcessor


class AyaVisionProcessor(TiledProcessor):
    """AyaVisionProcessor: ``(img_size // (patch_size * downsample_factor))**2`` tokens a tile."""

    def setting_text(self, name: str, default: str) -> str:
        value = self.processor_setting(name, default)
        return value if isinstance(value, str) and value else default

    @property
    def image_token(self) -> str:
        return self.setting_text("image_token", "<image>")

    @property
    def tokens_per_tile(self) -> int:
        settings = self.settings.processor
        patch = self.config_value("patch_size", 14, section="vision_config")
        factor = integer(settings, "downsample_factor", None, 1, 64)
        if "patch_size" not in settings:  # the processor's patch_size counts the downsampling
            factor = factor or self.config_value("downsample_factor", 1)
        patch = integer(settings, "patch_size", patch, 1, 1 << 12) * (factor or 1)
        size = self.config_value("image_size", 364, section="vision_config")
        return (integer(settings, "img_size", size, 1, 1 << 16) // patch) ** 2

    def expansion(self, tiles: int) -> str:
        patch = self.setting_text("img_patch_token", "<|IMG_PATCH|>") * self.tokens_per_tile
        tile = self.setting_text("tile_token", "TILE")
        text = self.setting_text("start_of_img_token", "<|START_OF_IMG|>")
        text += "".join(f"{tile}_{index}{patch}" for index in range(1, tiles))
        text += self.setting_text("tile_global_token", "TILE_GLOBAL") + patch
        return text + self.setting_text("end_of_img_token", "<|END_OF_IMG|>")
