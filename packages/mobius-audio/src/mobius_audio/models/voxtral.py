"""Voxtral: Whisper's encoder over whole 30 s chunks, states stacked by four, an MLP, Llama.

transformers' ``VoxtralEncoder`` is Whisper's encoder exactly (no mask: every chunk is a
full window of ``2 * max_source_positions`` frames, the processor cutting longer audio
into such chunks), so mobius-audio's :class:`~mobius_audio.models.whisper.WhisperEncoder`
is the tower. Its states ``[chunks, max_source_positions, d_model]`` are reshaped to
rows of ``intermediate_size`` (four consecutive states for the hub's 1280 -> 5120:
375 tokens a chunk) and go through ``multi_modal_projector`` (``linear_1``, the
``projector_hidden_act``, ``linear_2``, no biases) to the text decoder's width; every
token of every chunk is kept. The text decoder is whatever mobius registers for
``text_config.model_type`` (Llama for mistralai/Voxtral-Mini-3B-2507).

The audio graph takes ``input_features`` alone ([chunks, mel_bins, frames]): Voxtral has
no feature mask. Checkpoints: transformers' layout on the hub (``audio_tower.*``,
``multi_modal_projector.*``, ``language_model.model.*``, ``language_model.lm_head.*``:
mistralai/Voxtral-Mini-3B-2507, Voxtral-Small-24B-2507) and transformers 5's saved one.
The package keeps the checkpoint's ``tekken.json`` (:mod:`mobius_audio.voxtral_source`),
mistral-common's tokenizer, which ``mobius generate`` prompts with
(:mod:`mobius_audio.voxtral_generate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import ACTIVATIONS, Linear, get_activation
from mobius.errors import ConfigError
from mobius_audio.models._audio_lm import (
    AudioLanguageConfig,
    AudioLanguageModel,
    WhisperTowerConfig,
)
from mobius_audio.models.whisper import WhisperEncoder


@dataclass
class VoxtralConfig(AudioLanguageConfig):
    projector_hidden_act: str = "gelu"

    audio_config_class = WhisperTowerConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        audio = fields["audio"]
        if audio.encoder_ffn_dim % audio.hidden_size or (
            audio.max_source_positions * audio.hidden_size % audio.encoder_ffn_dim
        ):
            raise ConfigError(
                f"audio_config.intermediate_size {audio.encoder_ffn_dim} does not stack whole "
                f"states of hidden_size {audio.hidden_size} over max_source_positions "
                f"{audio.max_source_positions}"
            )
        act = getattr(hf_config, "projector_hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"projector_hidden_act {act!r} is not one mobius knows")
        return dict(fields, projector_hidden_act=act)


class VoxtralMultiModalProjector(nn.Module):
    def __init__(self, stacked: int, hidden: int, act: str) -> None:
        super().__init__()
        self.linear_1 = Linear(stacked, hidden, bias=False)
        self.act = get_activation(act)
        self.linear_2 = Linear(hidden, hidden, bias=False)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


class VoxtralForConditionalGeneration(AudioLanguageModel):
    config_class = VoxtralConfig

    def make_audio_tower(self, config: VoxtralConfig) -> nn.Module:
        return WhisperEncoder(config.audio)

    def make_projector(self, config: VoxtralConfig) -> nn.Module:
        return VoxtralMultiModalProjector(
            config.audio.encoder_ffn_dim, config.text.hidden_size, config.projector_hidden_act
        )

    def audio_inputs(self, dtype) -> list[tuple]:
        audio = self.config.audio
        frames = 2 * audio.max_source_positions  # transformers refuses any other length
        return [("input_features", dtype, ["num_audios", audio.num_mel_bins, frames])]

    def audio_features(self, op, input_features):
        states = self.audio_tower(op, input_features)  # [chunks, max_source_positions, d]
        stacked = op.Reshape(
            states, op.Constant(value_ints=[-1, self.config.audio.encoder_ffn_dim])
        )
        return self.multi_modal_projector(op, stacked)


MODEL_TYPES = {"voxtral": VoxtralForConditionalGeneration}
