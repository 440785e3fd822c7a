"""Audio Flamingo 3: Qwen2-Audio's tower, a two-layer MLP projector with biases, Qwen2.

transformers' ``AudioFlamingo3Encoder`` is ``Qwen2AudioEncoder`` (Whisper's convolutions,
position table and pre-norm layers under a key mask, states averaged in pairs,
``layer_norm``), so :class:`~mobius_audio.models.qwen2_audio.Qwen2AudioEncoder` is the
tower: each 30 s window keeps its first ``((frames - 1) // 2 + 1) // 2`` tokens for
``frames`` real feature frames. The delta is the projector (``linear_1`` from the tower's
width to the text width, ``projector_hidden_act``, ``linear_2``, biases when
``projector_bias``, Voxtral's shape without its stacking) and the mask's name,
``input_features_mask`` (the processor's). The processor cuts longer audio into windows,
one row of ``input_features`` each; their tokens follow one another in order. The text
decoder is whatever mobius registers for ``text_config.model_type`` (Qwen2).

Checkpoints: transformers' layout (``audio_tower.*``, ``multi_modal_projector.*``,
``language_model.model.*``, ``language_model.lm_head.*``: nvidia/audio-flamingo-3-hf)
and the one transformers 5 saves (``model.audio_tower.*``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import ACTIVATIONS, Linear, get_activation
from mobius.errors import ConfigError
from mobius_audio.models.qwen2_audio import (
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
)


@dataclass
class AudioFlamingo3Config(Qwen2AudioConfig):
    projector_hidden_act: str = "gelu"
    projector_bias: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        act = getattr(hf_config, "projector_hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"projector_hidden_act {act!r} is not one mobius knows")
        bias = getattr(hf_config, "projector_bias", True)
        if not isinstance(bias, bool):
            raise ConfigError(f"projector_bias is {bias!r}, not a bool")
        return dict(fields, projector_hidden_act=act, projector_bias=bias)


class AudioFlamingo3MultiModalProjector(nn.Module):
    """``linear_1`` (audio width -> text width), the activation, ``linear_2``."""

    def __init__(self, audio_width: int, text_width: int, act: str, bias: bool) -> None:
        super().__init__()
        self.linear_1 = Linear(audio_width, text_width, bias=bias)
        self.act = get_activation(act)
        self.linear_2 = Linear(text_width, text_width, bias=bias)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


class AudioFlamingo3ForConditionalGeneration(Qwen2AudioForConditionalGeneration):
    """Qwen2-Audio's tower and decoder composition with Audio Flamingo 3's projector."""

    config_class = AudioFlamingo3Config

    def make_projector(self, config: AudioFlamingo3Config) -> nn.Module:
        return AudioFlamingo3MultiModalProjector(
            config.audio.hidden_size,
            config.text.hidden_size,
            config.projector_hidden_act,
            config.projector_bias,
        )

    def audio_inputs(self, dtype) -> list[tuple]:
        mels = self.config.audio.num_mel_bins
        return [
            ("input_features", dtype, ["num_audios", mels, "audio_frames"]),  # one row a window
            ("input_features_mask", ir.DataType.INT64, ["num_audios", "audio_frames"]),
        ]


MODEL_TYPES = {"audioflamingo3": AudioFlamingo3ForConditionalGeneration}
