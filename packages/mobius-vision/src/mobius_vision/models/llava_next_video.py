"""LLaVA-NeXT-Video, images only: LLaVA-NeXT's AnyRes image path as it is.

The video path (``pixel_values_videos``, pooled by ``vision_resampler``) is not
built: the graphs take images, and ``<video>`` placeholders embed as plain tokens,
as transformers does when no video is given. The resampler's weights (a conv in
``spatial_pool_mode="conv"``) are left unused.
"""

from __future__ import annotations

from mobius_vision.models.llava_next import LlavaNextForConditionalGeneration


class LlavaNextVideoForConditionalGeneration(LlavaNextForConditionalGeneration):
    """LLaVA-NeXT-Video's image path (see the module docstring)."""

    @property
    def ignored(self) -> tuple[str, ...]:
        resampler = ("vision_resampler.*", "model.vision_resampler.*")  # the video pooler
        return (*super().ignored, *resampler)


MODEL_TYPES = {"llava_next_video": LlavaNextVideoForConditionalGeneration}
