"""MusicGen-Melody: MusicGen's decoder without cross-attention, its conditioning prepended.

The conditioning is a chroma sequence (``num_chroma`` pitch classes a frame,
``audio_enc_to_dec_proj`` to the decoder's width, repeated up to ``chroma_length``
frames and cut there) followed by the T5 text states (``enc_to_dec_proj``, padded
tokens zeroed). ``MusicgenMelodyForConditionalGeneration.generate`` prepends it to
the decoder's first step and attends over it without a mask (padded text rows are
zero states, not masked keys); positions count over the conditioning and the codes
alike. A text-only prompt conditions on the "null" chroma, a single frame of pitch
class 0. Checkpoint names: MusicGen's (:mod:`mobius_audio.models.musicgen`) without
``encoder_attn``, plus ``audio_enc_to_dec_proj``. The contract is the prefix form of
:mod:`mobius_audio.tasks_music`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import onnx_ir as ir

from mobius.components import Linear
from mobius_audio.models._checks import checked_int
from mobius_audio.models.musicgen import (
    MusicgenConfig,
    MusicgenDecoder,
    MusicgenForCausalLM,
    MusicgenForConditionalGeneration,
    MusicgenModel,
    MusicgenSelfAttentionLayer,
)


@dataclass
class MusicgenMelodyConfig(MusicgenConfig):
    num_chroma: int = 12
    chroma_length: int = 235  # conditioning frames the chroma is repeated to (30 s)

    @classmethod
    def from_hf(cls, hf: Any) -> MusicgenMelodyConfig:
        base = MusicgenConfig.from_hf(hf)
        values = {
            name: checked_int(getattr(hf, name, None), f"musicgen_melody {name}")
            for name in ("num_chroma", "chroma_length")
        }
        return cls(**{f.name: getattr(base, f.name) for f in fields(MusicgenConfig)}, **values)

    @property
    def project_chroma(self) -> bool:
        """``audio_enc_to_dec_proj`` exists: the chroma's width is not the decoder's."""
        return self.num_chroma != self.hidden_size


class MusicgenMelodyDecoder(MusicgenDecoder):
    layer_class = MusicgenSelfAttentionLayer

    def forward(self, op, codes, conditioning, self_cache):
        """``conditioning [batch, prefix, hidden]`` (``prefix`` 0 after the first step) before the
        codes' embeddings; states of the codes' positions alone, and the presents."""
        x = op.Concat(conditioning, self.embed(op, codes), axis=1)
        hidden, presents = self.run_layers(op, x, self_cache)
        prefix = op.Shape(conditioning, start=1, end=2)
        end = op.Constant(value_ints=[2**62])
        return op.Slice(hidden, prefix, end, op.Constant(value_ints=[1])), presents


class MusicgenMelodyModel(MusicgenModel):
    decoder_class = MusicgenMelodyDecoder


class MusicgenMelodyForCausalLM(MusicgenForCausalLM):
    model_class = MusicgenMelodyModel


class MusicgenMelodyForConditionalGeneration(MusicgenForConditionalGeneration):
    """The prefix text-to-music hooks: ``encode_conditioning``, ``decode``, ``decode_audio``."""

    config_class = MusicgenMelodyConfig
    task = "text-to-music-prefix"
    decoder_class = MusicgenMelodyForCausalLM

    def __init__(self, config: MusicgenMelodyConfig) -> None:
        super().__init__(config)
        if config.project_chroma:
            self.audio_enc_to_dec_proj = Linear(config.num_chroma, config.hidden_size, bias=True)

    def encode_conditioning(self, op, input_ids, attention_mask, input_features):
        """``[batch, chroma_length + text, hidden]``: the chroma frames (``input_features [batch,
        frames, num_chroma]``) projected, tiled to ``chroma_length`` and cut, then the text states."""
        text = self.text_encoder(op, input_ids, attention_mask)["last_hidden_state"]
        if self.config.project_text:
            text = self.enc_to_dec_proj(op, text)
        text = op.Mul(text, op.Unsqueeze(op.Cast(attention_mask, to=ir.DataType.FLOAT), [2]))
        chroma = input_features
        if self.config.project_chroma:
            chroma = self.audio_enc_to_dec_proj(op, chroma)
        length = self.config.chroma_length
        frames = op.Shape(chroma, start=1, end=2)
        wanted = op.Constant(value_ints=[length])
        repeats = op.Div(op.Sub(op.Add(wanted, frames), op.Constant(value_ints=[1])), frames)
        tiled = op.Tile(chroma, op.Concat(op.Constant(value_ints=[1]), repeats, [1], axis=0))
        chroma = op.Slice(tiled, [0], wanted, [1])
        return op.Concat(chroma, text, axis=1)

    def decode(self, op, codes, conditioning, self_cache):
        """Logits ``[batch, codebooks, seq, vocab]`` of the codes' positions and the presents."""
        return self.decoder(op, codes, conditioning, self_cache)


MODEL_TYPES = {"musicgen_melody": MusicgenMelodyForConditionalGeneration}
