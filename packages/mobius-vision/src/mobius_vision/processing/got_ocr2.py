"""GOT-OCR 2.0's images: one resized square each, and ``num_image_tokens`` ``<imgpad>`` tokens.

``GotOcr2Processor`` calls its image processor with ``crop_to_patches=False`` unless told
otherwise, so an image is resized to the tower's ``size`` (no tiles), rescaled and
normalised; the prompt's ``<imgpad>`` becomes the tower's image tokens (the processor's
``num_image_tokens``: 256 on the hub, ``(image_size / patch_size / 4)^2``).
"""

from __future__ import annotations

from mobius_vision.processing._image import integer
from mobius_vision.processing._tiles import TiledProcessor


class GotOcr2Processor(TiledProcessor):
    """GotOcr2Processor over prompts that hold ``<img><imgpad></img>`` per image."""

    image_token = "<imgpad>"

    def crops(self) -> bool:
        return False

    @property
    def image_seq_length(self) -> int:
        """Image tokens per image: the processor's setting, else the tower's grid over 4."""
        size = self.config_value("image_size", 1024, section="vision_config")
        patch = self.config_value("patch_size", 16, section="vision_config")
        size = size[0] if isinstance(size, list) else size
        patch = patch[0] if isinstance(patch, list) else patch
        if not (isinstance(size, int) and isinstance(patch, int) and 0 < patch <= size):
            size, patch = 1024, 16
        default = (size // patch // 4) ** 2
        return integer(self.settings.processor, "num_image_tokens", default, 1, 1 << 16)

    def expansion(self, tiles: int) -> str:
        return self.image_token * self.image_seq_length * tiles

    def with_placeholders(self, prompt: str, count: int) -> str:
        """``prompt`` after one ``<img><imgpad></img>`` and a newline per image, as the
        processor's own OCR prompt writes them, when it holds no placeholder."""
        if count == 0 or self.image_token in prompt:
            return prompt
        return f"<img>{self.image_token}</img>\n" * count + prompt
