"""Granite Speech Plus: Granite Speech whose projector also reads chosen intermediate states.

transformers' ``GraniteSpeechPlusForConditionalGeneration`` is Granite Speech
(:mod:`mobius_audio.models.granite_speech`) but for the encoder's output: with
``encoder_config.cat_hidden_layers`` it is the concatenation, on the feature axis, of
the listed states (0: ``input_linear``'s output, ``i``: conformer block ``i``'s) and the
final ones, in that order, so the Q-Former's ``encoder_hidden_size`` is ``hidden_dim``
times one more than the list's length. Block ``num_layers // 2``'s state is taken after
the mid-layer CTC residual is added (transformers adds it in place to the very tensor it
kept). Without the list it is Granite Speech exactly.

Checkpoints: ibm-granite/granite-speech-4.1-2b-plus (the hub's layout) and transformers
5's saved one, as Granite Speech.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_audio.models._granite_speech_encoder import (
    GraniteSpeechCTCEncoder,
    GraniteSpeechEncoderConfig,
)
from mobius_audio.models.granite_speech import (
    GraniteSpeechConfig,
    GraniteSpeechForConditionalGeneration,
)


@dataclass(frozen=True)
class GraniteSpeechPlusEncoderConfig(GraniteSpeechEncoderConfig):
    """Granite Speech's encoder sizes and ``cat_hidden_layers`` (empty: none)."""

    cat_hidden_layers: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, hf: Any) -> GraniteSpeechPlusEncoderConfig:
        base = GraniteSpeechEncoderConfig.from_hf(hf)
        layers = getattr(hf, "cat_hidden_layers", None) or []
        if not isinstance(layers, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < base.num_layers
            for i in layers
        ):
            raise ConfigError(
                f"encoder_config.cat_hidden_layers {layers!r} are not layer indices from 0 "
                f"to {base.num_layers - 1}"
            )
        return cls(**dataclasses.asdict(base), cat_hidden_layers=tuple(layers))

    @property
    def output_width(self) -> int:
        return self.hidden_dim * (len(set(self.cat_hidden_layers)) + 1)


class GraniteSpeechPlusCTCEncoder(GraniteSpeechCTCEncoder):
    """Granite Speech's conformer giving the listed states beside the final ones."""

    def __init__(self, config: GraniteSpeechPlusEncoderConfig) -> None:
        super().__init__(config)
        self.cat_layers = config.cat_hidden_layers

    def forward(self, op, input_features):
        """``[batch, frames, input_dim]`` -> ``[batch, frames, output_width]``."""
        x = self.input_linear(op, input_features)
        kept = {0: x}
        middle = len(self.layers) // 2
        for index, layer in enumerate(self.layers, start=1):
            x = layer(op, x)
            if index == middle:  # before it is kept: transformers adds it in place
                ctc = op.Softmax(self.out(op, x), axis=-1)
                x = op.Add(x, self.out_mid(op, ctc))
            kept[index] = x
        if not self.cat_layers:
            return x
        return op.Concat(*[kept[i] for i in sorted(set(self.cat_layers))], x, axis=-1)


@dataclass
class GraniteSpeechPlusConfig(GraniteSpeechConfig):
    audio_config_class = GraniteSpeechPlusEncoderConfig


class GraniteSpeechPlusForConditionalGeneration(GraniteSpeechForConditionalGeneration):
    """Granite Speech with :class:`GraniteSpeechPlusCTCEncoder` as its tower."""

    config_class = GraniteSpeechPlusConfig

    def make_audio_tower(self, config: GraniteSpeechPlusConfig) -> nn.Module:
        return GraniteSpeechPlusCTCEncoder(config.audio)


MODEL_TYPES = {"granite_speech_plus": GraniteSpeechPlusForConditionalGeneration}
