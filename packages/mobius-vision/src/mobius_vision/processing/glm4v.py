"""GLM-4.1V and GLM-4.5V images: Qwen-VL's flattened patches and M-RoPE positions, resized
GLM's way.

What ``Glm4vImageProcessor`` (its PIL backend) and ``Glm4vProcessor`` do, without torch.
Everything but the target size is Qwen-VL's (:mod:`.qwen_vl`): the patch rows, the grids,
one ``<|image|>`` per merge block, and the rope index (GLM's ``get_rope_index`` gives the
same positions for images). :func:`glm4v_smart_resize` first scales an image with a side
under one merge block up to it, and bounds the pixel count of the clip of
``temporal_patch_size`` frames a still image becomes, not of one frame.
"""

from __future__ import annotations

import math

from mobius.errors import MobiusError
from mobius_vision.processing.qwen_vl import MAX_ASPECT_RATIO, QwenVLProcessor


def glm4v_smart_resize(
    height: int, width: int, factor: int, frames: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """The ``(height, width)`` an image is resized to: multiples of ``factor`` whose area
    times ``frames`` lies within ``[min_pixels, max_pixels]``, the aspect ratio kept as
    closely as that allows (transformers' GLM-4V ``smart_resize`` for a still image)."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise MobiusError(
            f"an image of {height}x{width} pixels is too elongated for GLM-4V "
            f"(the longer side may be at most {MAX_ASPECT_RATIO} times the shorter)"
        )
    new_height = round(height / factor) * factor
    new_width = round(width / factor) * factor
    if frames * new_height * new_width > max_pixels:
        scale = math.sqrt(frames * height * width / max_pixels)
        new_height = max(factor, math.floor(height / scale / factor) * factor)
        new_width = max(factor, math.floor(width / scale / factor) * factor)
    elif frames * new_height * new_width < min_pixels:
        scale = math.sqrt(min_pixels / (frames * height * width))
        new_height = math.ceil(height * scale / factor) * factor
        new_width = math.ceil(width * scale / factor) * factor
    return new_height, new_width


class Glm4vProcessor(QwenVLProcessor):
    """``Glm4vProcessor`` over images: ``<|begin_of_image|><|image|>...<|end_of_image|>``."""

    #: Glm4vImageProcessor's defaults.
    default_min_pixels, default_max_pixels = 112 * 112, 28 * 28 * 15000
    default_image_token = "<|image|>"
    default_vision_start, default_vision_end = "<|begin_of_image|>", "<|end_of_image|>"

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        factor = self.patch_size * self.merge_size
        frames = self.temporal_patch_size
        return glm4v_smart_resize(height, width, factor, frames, *self.pixel_bounds)
