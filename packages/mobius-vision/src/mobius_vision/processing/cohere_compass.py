"""Cohere Compass images: Qwen-VL's patches and M-RoPE positions under Cohere's token names.

``CohereCompassProcessor`` is ``Qwen3VLProcessor`` over ``Qwen2VLImageProcessor``; only
its placeholder and markers differ (``<|IMAGE_PAD|>`` between ``<|VISION_START|>`` and
``<|VISION_END|>``), and it names them itself, whatever the tokenizer says.
"""

from __future__ import annotations

from mobius_vision.processing.qwen_vl import QwenVLProcessor

#: The tokens CohereCompassProcessor writes, by the attribute QwenVLProcessor reads.
TOKENS = {
    "image_token": "<|IMAGE_PAD|>",
    "vision_start_token": "<|VISION_START|>",
    "vision_end_token": "<|VISION_END|>",
}


class CohereCompassProcessor(QwenVLProcessor):
    """CohereCompassProcessor over images."""

    def token_text(self, attribute: str, default: str) -> str:
        return TOKENS.get(attribute) or super().token_text(attribute, default)
