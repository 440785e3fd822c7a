"""SeamlessM4T v2's text-to-unit model (``t2u_model``): v1's unit encoder, then a non-autoregressive decoder.

transformers' ``SeamlessM4Tv2TextToUnitForConditionalGeneration`` reads the
config with every ``t2u_*`` field over its unprefixed twin, as v1's does
(:func:`mobius_audio.models._seamless_t2u.t2u_config`). Its encoder is v1's
(pre-norm layers over the text decoder's states, no embeddings, no positions).
Its decoder makes every unit at once:

1. the encoder states are repeated by each text token's character count
   (``char_count_per_id``: the runner counts them in numpy), and to each
   character's state are added its embedding (``embed_char``, scaled by
   ``sqrt(hidden)`` when ``scale_embedding``) and ``pos_emb_alpha_char`` times a
   fairseq sinusoid (positions ``pad + 1, pad + 2...``, padding not skipped);
2. the duration predictor (convs with "same" padding, ReLU, LayerNorm; padded
   characters zeroed before each conv) gives each character
   ``max(round(expm1(log_duration)), 1)`` frames, ``0`` for padding; the
   characters are repeated that many times and ``pos_emb_alpha`` times a sinusoid
   added;
3. post-norm layers: self-attention over the real frames, then two kernel-7 convs
   (padded frames zeroed before each), and a final LayerNorm; ``lm_head``
   (no bias) gives the unit logits.

A row shorter than the batch's longest is followed by zero states at both
upsamplings, as transformers' ``pad_sequence`` pads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    get_activation,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius_audio.models._seamless_t2u import SeamlessM4TTextToUnitEncoder, t2u_config
from mobius_audio.models._seamless_vocoder import repeat_frames, same_pads
from mobius_audio.models._vits_layers import Conv1d, floats, ints
from mobius_audio.models.seamless_m4t import BLOCK_NORM_EPS, config_int
from mobius_audio.models.seamless_m4t_text import SeamlessM4TTextConfig
from mobius_audio.models.speech_to_text import sinusoids

INT64 = ir.DataType.INT64
CONV_KERNEL = 7  # transformers' decoder layers' two convs


@dataclass
class SeamlessM4Tv2TextToUnitConfig(SeamlessM4TTextConfig):
    """v1's unit-model fields and the character and duration fields of v2's decoder."""

    char_vocab_size: int = 1
    duration_hidden_dim: int = 1
    duration_kernel: int = 3

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf)
        embed = config_int(hf, "variance_predictor_embed_dim", 1)
        if embed != fields["hidden_size"]:
            raise ConfigError(
                f"{hf.model_type}: t2u_variance_predictor_embed_dim={embed} must equal "
                f"hidden_size={fields['hidden_size']} (it reads the character states)"
            )
        return dict(
            fields,
            char_vocab_size=config_int(hf, "char_vocab_size", 1),
            duration_hidden_dim=config_int(hf, "variance_predictor_hidden_dim", 1),
            duration_kernel=config_int(hf, "variance_predictor_kernel_size", 1),
        )


def v2_t2u_config(hf: Any) -> SeamlessM4Tv2TextToUnitConfig:
    """The v2 unit model's config: ``hf`` with its ``t2u_*`` fields over their twins, checked."""
    return t2u_config(hf, SeamlessM4Tv2TextToUnitConfig)


def zero_padding(op, x, keep):
    """``x [batch, time, dim]`` with the frames where ``keep [batch, time]`` is false zeroed."""
    return op.Where(op.Unsqueeze(keep, [2]), x, floats(op, 0.0))


def conv_time(op, conv, x):
    """A channels-first conv over ``x [batch, time, dim]``."""
    return op.Transpose(conv(op, op.Transpose(x, perm=[0, 2, 1])), perm=[0, 2, 1])


def frames_below(op, x, lengths):
    """bool ``[batch, time]``: frame ``t`` of ``x [batch, time, ...]`` is before its row's ``lengths [batch]``."""
    time = op.Range(ints(op, 0), op.Squeeze(op.Shape(x, start=1, end=2), [0]), ints(op, 1))
    return op.Less(op.Unsqueeze(time, [0]), op.Unsqueeze(lengths, [1]))


def sequential_sinusoids(op, x, dim: int, padding_idx: int):
    """transformers' sinusoids of ``inputs_embeds``: positions ``padding_idx + 1...`` ``[time, dim]``."""
    time = op.Squeeze(op.Shape(x, start=1, end=2), [0])
    first = ints(op, padding_idx + 1)
    positions = op.Range(first, op.Add(time, first), ints(op, 1))
    return sinusoids(op, positions, dim, padding_idx)


class SeamlessM4Tv2VariancePredictor(nn.Module):
    """Log durations ``[batch, time]`` of states ``[batch, time, dim]``, padded frames zeroed before each conv."""

    def __init__(self, dim: int, hidden: int, kernel: int) -> None:
        super().__init__()
        self.conv1 = Conv1d(dim, hidden, kernel, same_pads(kernel))
        self.ln1 = LayerNorm(hidden, BLOCK_NORM_EPS)
        self.conv2 = Conv1d(hidden, hidden, kernel, same_pads(kernel))
        self.ln2 = LayerNorm(hidden, BLOCK_NORM_EPS)
        self.proj = Linear(hidden, 1, bias=True)

    def forward(self, op, x, keep):
        for conv, norm in ((self.conv1, self.ln1), (self.conv2, self.ln2)):
            x = norm(op, op.Relu(conv_time(op, conv, zero_padding(op, x, keep))))
        return op.Squeeze(self.proj(op, x), [2])


class SeamlessM4Tv2TextToUnitDecoderLayer(nn.Module):
    """Post-norm: self-attention, then two "same" convs (padded frames zeroed before each)."""

    def __init__(self, config: SeamlessM4Tv2TextToUnitConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.decoder_heads)
        self.self_attn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.conv1 = Conv1d(d, d, CONV_KERNEL, same_pads(CONV_KERNEL))
        self.conv2 = Conv1d(d, d, CONV_KERNEL, same_pads(CONV_KERNEL))
        self.conv_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.act = get_activation(config.act)

    def forward(self, op, x, bias, keep):
        x = self.self_attn_layer_norm(op, op.Add(x, self.self_attn(op, x, bias)))
        h = zero_padding(op, conv_time(op, self.conv1, zero_padding(op, x, keep)), keep)
        h = conv_time(op, self.conv2, self.act(op, h))
        return self.conv_layer_norm(op, op.Add(x, h))


class SeamlessM4Tv2TextToUnitDecoder(nn.Module):
    """Encoder states, character ids and counts -> ``(states [batch, frames, hidden], frame mask)``."""

    def __init__(self, config: SeamlessM4Tv2TextToUnitConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.embed_char = Embedding(config.char_vocab_size, d)
        self.pos_emb_alpha_char = nn.Parameter([1])
        self.pos_emb_alpha = nn.Parameter([1])
        self.duration_predictor = SeamlessM4Tv2VariancePredictor(
            d, config.duration_hidden_dim, config.duration_kernel
        )
        self.layers = nn.ModuleList(
            [SeamlessM4Tv2TextToUnitDecoderLayer(config) for _ in range(config.decoder_layers)]
        )
        self.layer_norm = LayerNorm(d, BLOCK_NORM_EPS)

    def positions(self, op, x, alpha):
        config = self.config
        table = sequential_sinusoids(op, x, config.hidden_size, config.pad_token_id)
        return op.Mul(alpha, op.CastLike(table, x))

    def forward(self, op, encoder_hidden_states, char_input_ids, char_count_per_id):
        config = self.config
        chars, _ = repeat_frames(op, encoder_hidden_states, char_count_per_id)
        char_mask = frames_below(
            op, chars, op.ReduceSum(char_count_per_id, ints(op, [1]), keepdims=0)
        )
        embedded = self.embed_char(op, char_input_ids)
        if config.scale_embedding:
            embedded = op.Mul(embedded, math.sqrt(config.hidden_size))
        chars = op.Add(op.Add(embedded, self.positions(op, chars, self.pos_emb_alpha_char)), chars)

        log_durations = self.duration_predictor(op, chars, char_mask)
        durations = op.Cast(op.Round(op.Sub(op.Exp(log_durations), floats(op, 1.0))), to=INT64)
        durations = op.Where(char_mask, op.Max(durations, ints(op, 1)), ints(op, 0))
        frames, _ = repeat_frames(op, chars, durations)
        x = op.Add(frames, self.positions(op, frames, self.pos_emb_alpha))

        frame_mask = frames_below(op, x, op.ReduceSum(durations, ints(op, [1]), keepdims=0))
        bias = padding_bias(op, op.Cast(frame_mask, to=INT64), x.dtype)
        for layer in self.layers:
            x = layer(op, x, bias, frame_mask)
        return self.layer_norm(op, x), frame_mask


class SeamlessM4Tv2TextToUnitModel(nn.Module):
    def __init__(self, config: SeamlessM4Tv2TextToUnitConfig) -> None:
        super().__init__()
        self.encoder = SeamlessM4TTextToUnitEncoder(config)
        self.decoder = SeamlessM4Tv2TextToUnitDecoder(config)


class SeamlessM4Tv2TextToUnitForConditionalGeneration(nn.Module):
    """``model`` (encoder, non-autoregressive decoder) and ``lm_head`` over the unit vocabulary."""

    def __init__(self, config: SeamlessM4Tv2TextToUnitConfig) -> None:
        super().__init__()
        self.model = SeamlessM4Tv2TextToUnitModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)
