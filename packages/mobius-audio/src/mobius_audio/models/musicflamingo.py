"""Music Flamingo: Audio Flamingo 3 with a rotary time embedding between tower and projector.

transformers' ``MusicFlamingoModel`` runs Audio Flamingo 3's tower, then rotates the
first ``2 * int(d_model * partial_rotary_factor)`` channels of every state (adjacent
pairs, as ``rotate_half`` interleaved) by angles that depend on where the state lies in
its clip: ``w``, its window's index within the clip, and ``t``, its place within the
window (``S`` states a window, the padded window's). Its timestamp is
``(w * S + t) * 4 * audio_frame_step`` seconds; the angles are ``[w / M * inv_freq,
t / M * 2 pi * inv_freq]`` (each repeated twice), times ``-2 pi`` times the timestamp,
with ``M`` = ``rope_theta`` and ``inv_freq`` RoPE's over that dimension. Only then does
``multi_modal_projector`` map the states to the text width.

``w`` is not in the audio inputs: transformers finds it from the placeholder runs of
``input_ids`` (a clip's windows fill one run). So the audio graph gives the tower's
states (``audio_features`` [audio tokens, d_model]) and each state's ``(t, S)``
(``audio_token_slots``); the embedding graph, which holds the ids, counts each
placeholder's place ``r`` in its run (``w = (r - t) / S``: every window but a clip's last
is whole), rotates, projects and merges. The angles are float32, in transformers'
order; transformers rotates in float64, the graph in float32.

Checkpoints: nvidia/music-flamingo-2601-hf (transformers' layout) and transformers 5's
saved one, as Audio Flamingo 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import merge_image_features
from mobius.errors import ConfigError
from mobius_audio.models.audioflamingo3 import (
    AudioFlamingo3Config,
    AudioFlamingo3ForConditionalGeneration,
)
from mobius_audio.models.qwen2_audio import first_of_each_row

INT64 = ir.DataType.INT64
FLOAT = ir.DataType.FLOAT


@dataclass
class MusicFlamingoConfig(AudioFlamingo3Config):
    rope_theta: float = 1200.0
    partial_rotary_factor: float = 0.2
    audio_frame_step: float = 0.01

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        rope = getattr(hf_config, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ConfigError(f"rope_parameters.rope_type {rope['rope_type']!r} is not 'default'")
        theta = rope.get("rope_theta", 1200.0)
        factor = rope.get("partial_rotary_factor", 1.0)
        step = getattr(hf_config, "audio_frame_step", 0.01)
        for name, value in (("rope_theta", theta), ("partial_rotary_factor", factor),
                            ("audio_frame_step", step)):  # fmt: skip
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} is {value!r}, not a positive number")
        if int(fields["audio"].hidden_size * factor) % 2:
            raise ConfigError(
                f"audio_config.hidden_size {fields['audio'].hidden_size} times "
                f"partial_rotary_factor {factor} is not an even rotary width"
            )
        return dict(
            fields, rope_theta=float(theta), partial_rotary_factor=float(factor),
            audio_frame_step=float(step),
        )  # fmt: skip


def _f32(op, value):
    return op.Constant(value=ir.tensor(np.asarray(value, np.float32)))


def _i64(op, value):
    return op.Constant(value=ir.tensor(np.asarray(value, np.int64)))


def placeholder_run_places(op, is_placeholder):
    """``[placeholders]`` int64: each placeholder's place in its run, row-major order."""
    marks = op.Cast(is_placeholder, to=INT64)  # [batch, sequence]
    before = op.Pad(
        op.Slice(marks, _i64(op, [0]), _i64(op, [-1]), _i64(op, [1])), _i64(op, [0, 1, 0, 0])
    )  # the previous position's mark, 0 before each row
    starts = op.Reshape(op.Mul(marks, op.Sub(_i64(op, 1), before)), _i64(op, [-1]))
    run = op.CumSum(starts, _i64(op, 0))  # [batch * sequence]: 1-based run number
    run_starts = op.Reshape(op.NonZero(starts), _i64(op, [-1]))  # [runs]
    where = op.Reshape(op.NonZero(op.Reshape(marks, _i64(op, [-1]))), _i64(op, [-1]))
    first = op.Gather(run_starts, op.Sub(op.Gather(run, where), _i64(op, 1)))
    return op.Sub(where, first)


class MusicFlamingoForConditionalGeneration(AudioFlamingo3ForConditionalGeneration):
    """Audio Flamingo 3 whose projector runs in the embedding graph after the time rotation."""

    config_class = MusicFlamingoConfig

    def audio_outputs(self) -> list[tuple]:
        return [
            ("audio_features", ["num_audio_tokens", self.config.audio.hidden_size]),
            ("audio_token_slots", ["num_audio_tokens", 2]),  # (t, S) of each state
        ]

    def audio_modules(self) -> list[nn.Module]:
        return [self.audio_tower]

    def audio_features(self, op, input_features, input_features_mask):
        states = self.audio_tower(op, input_features, input_features_mask)  # [tokens, d]
        frames = op.ReduceSum(op.Cast(input_features_mask, to=INT64), [1], keepdims=0)
        one, two = _i64(op, 1), _i64(op, 2)
        real = op.Div(op.Add(op.Div(op.Sub(frames, one), two), one), two)  # [windows]
        padded = op.Shape(input_features, start=2, end=3)
        width = op.Div(op.Add(op.Div(op.Sub(padded, one), two), one), two)  # [1]: S
        keep = op.NonZero(first_of_each_row(op, real, width))  # [2, tokens]: (window, t)
        t = op.Gather(keep, _i64(op, 1), axis=0)  # [tokens]
        sizes = op.Add(op.Mul(t, _i64(op, 0)), width)  # [tokens]: S each
        slots = op.Concat(op.Unsqueeze(t, [1]), op.Unsqueeze(sizes, [1]), axis=1)
        return states, op.Cast(slots, to=FLOAT)

    def rotate(self, op, states, places, slots):
        """``states`` [tokens, d] rotated by the time embedding (module docstring)."""
        c = self.config
        d = c.audio.hidden_size
        dim = int(d * c.partial_rotary_factor)
        inv = np.float32(1.0) / (
            np.float32(c.rope_theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
        )
        slots = op.Cast(slots, to=INT64)
        t = op.Gather(slots, _i64(op, 0), axis=1)  # [tokens]
        size = op.Gather(slots, _i64(op, 1), axis=1)
        window = op.Div(op.Sub(places, t), size)  # w
        step = _f32(op, c.audio_frame_step * 4)
        times = op.Add(  # float32 as transformers: w * S * step + t * step
            op.Mul(op.Cast(op.Mul(window, size), to=FLOAT), step),
            op.Mul(op.Cast(t, to=FLOAT), step),
        )
        angle = op.Mul(op.Mul(op.Neg(times), _f32(op, 2.0)), _f32(op, math.pi))  # [tokens]
        theta, inv_freq = _f32(op, c.rope_theta), _f32(op, inv)
        window_freqs = op.Mul(op.Unsqueeze(op.Div(op.Cast(window, to=FLOAT), theta), [1]), inv_freq)
        time_freqs = op.Mul(
            op.Unsqueeze(op.Mul(op.Div(op.Cast(t, to=FLOAT), theta), _f32(op, 2 * math.pi)), [1]),
            inv_freq,
        )  # [tokens, dim / 2] each

        def twice(x):  # each frequency repeated: [tokens, dim]
            pairs = op.Expand(op.Unsqueeze(x, [2]), _i64(op, [1, 1, 2]))
            return op.Reshape(pairs, _i64(op, [0, dim]))

        freqs = op.Mul(
            op.Concat(twice(window_freqs), twice(time_freqs), axis=1), op.Unsqueeze(angle, [1])
        )  # [tokens, 2 dim]
        rot, rest = op.Split(states, _i64(op, [2 * dim, d - 2 * dim]), axis=1, _outputs=2)
        pairs = op.Reshape(rot, _i64(op, [0, dim, 2]))
        even, odd = op.Split(pairs, _i64(op, [1, 1]), axis=2, _outputs=2)
        turned = op.Reshape(op.Concat(op.Neg(odd), even, axis=2), _i64(op, [0, 2 * dim]))
        rot = op.Add(op.Mul(rot, op.Cos(freqs)), op.Mul(turned, op.Sin(freqs)))
        return op.Concat(rot, rest, axis=1)

    def embed(self, op, input_ids, audio_features, audio_token_slots):
        """Token embeddings, the placeholders taking the rotated, projected states."""
        embeds = self.token_embeddings(op, input_ids)  # [batch, sequence, hidden]
        rows = op.Shape(audio_features, start=0, end=1)
        has_features = op.Squeeze(op.Greater(rows, _i64(op, [0])), [0])
        is_audio = op.And(
            op.Equal(input_ids, op.Constant(value_int=self.config.audio_token_id)), has_features
        )
        places = placeholder_run_places(op, is_audio)  # [audio tokens]
        states = self.rotate(op, audio_features, places, audio_token_slots)
        features = self.multi_modal_projector(op, states)  # [audio tokens, text hidden]
        return merge_image_features(op, embeds, input_ids, features, self.config.audio_token_id)


MODEL_TYPES = {"musicflamingo": MusicFlamingoForConditionalGeneration}
