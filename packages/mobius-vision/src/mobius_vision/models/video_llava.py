"""Video-LLaVA, images only: LLaVA whose checkpoint names its tower ``image_tower``.

The image path is LLaVA's (feature layers, selection strategy, the two-layer
projector) over ``image_tower``, read into the composed ``vision_tower``. The
``video_tower`` (a second tower of the same config, for frames) is not built:
its tensors are left unused, and a ``<video>`` placeholder embeds as a plain
token, as transformers does without ``pixel_values_videos``.
"""

from __future__ import annotations

from mobius_vision.models.llava import LlavaForConditionalGeneration


class VideoLlavaForConditionalGeneration(LlavaForConditionalGeneration):
    def vision_inputs(self, dtype) -> list[tuple]:
        """``pixel_values_images``, as VideoLlavaProcessor names the images."""
        _, dtype, shape = super().vision_inputs(dtype)[0]
        return [("pixel_values_images", dtype, shape)]

    #: ``image_tower`` in every layout (hub, transformers 4.5x, 5) is the composed tower.
    renames = {
        "image_tower.vision_model.": "vision_tower.",
        "model.image_tower.": "vision_tower.",
        "image_tower.": "vision_tower.",
        "model.video_tower.": "video_tower.",
        **LlavaForConditionalGeneration.renames,
    }

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, "video_tower.*")  # frames are not built


MODEL_TYPES = {"video_llava": VideoLlavaForConditionalGeneration}
