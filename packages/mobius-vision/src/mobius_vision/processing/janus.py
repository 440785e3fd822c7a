"""Janus's images are DeepSeek-VL's (the longer side resized, padded square with the mean
colour); each placeholder becomes ``<begin_of_image>``, ``num_image_tokens`` image tokens and
``<end_of_image>``, and ``use_default_system_prompt`` puts Janus's system prompt first."""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._image import flag
from mobius_vision.processing.deepseek_vl import DeepseekVLProcessor

#: transformers' JanusProcessor's DEFAULT_SYSTEM_PROMPT (a fact of the model's prompt format).
SYSTEM_PROMPT = (
    "You are a helpful language and vision assistant. "
    "You are able to understand the visual content that the user provides, "
    "and assist the user with a variety of tasks using natural language.\n\n"
)


class JanusProcessor(DeepseekVLProcessor):
    """JanusProcessor (text generation): one square image, its tokens between begin and end."""

    def image_block(self) -> str:
        begin = self.token_text("boi_token", "<begin_of_image>")
        end = self.token_text("eoi_token", "<end_of_image>")
        return begin + super().image_block() + end

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        if flag(self.settings.processor, "use_default_system_prompt", False):
            text = SYSTEM_PROMPT + text
        return super().__call__(text, images)
