"""EnCodec: a SEANet conv encoder with an LSTM, Euclidean residual codebooks, a mirrored decoder.

The module tree follows ``EncodecModel`` checkpoints (``encoder.layers.0.conv``,
``quantizer.layers.0.codebook.embed``...); the conv stacks are
:mod:`mobius_audio.models._seanet`'s. Each quantizer picks the nearest row in Euclidean
distance and subtracts it from the residual; the decoder sums the chosen rows.

Built: ``facebook/encodec_24khz`` (one chunk, unnormalised, weight-normalised
convolutions) and the 48 kHz form (``norm_type`` ``time_group_norm``: a
``GroupNorm(1)`` after each conv, on a transposed conv's output before its crop;
``normalize``: each chunk divided by its RMS and the decoded chunk multiplied
back; ``chunk_length_s``/``overlap``: overlapping chunks cross-faded,
:mod:`mobius_audio.models._codec_chunks`). Those graphs carry ``audio_scales``.
Refused: chunks that overlap by more than a stride. The audio codec contract is
:mod:`mobius_audio.tasks_codec`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import positive_int
from mobius_audio.models._codec import fold_weight_norm, sum_of_codebook_rows
from mobius_audio.models._codec_chunks import (
    ChunkLayout,
    chunk_codes,
    frames_by_chunk,
    overlap_add,
    tail_chunk,
    whole_chunks,
)
from mobius_audio.models._seanet import (
    PAD_MODES,
    EncodecDecoder,
    EncodecEncoder,
    seanet_fields,
)


@dataclass
class EncodecConfig:
    model_type: str
    channels: int
    hidden_size: int
    num_filters: int
    num_residual_layers: int
    upsampling_ratios: tuple[int, ...]
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    dilation_growth_rate: int
    use_causal_conv: bool
    pad_mode: str
    compress: int
    num_lstm_layers: int
    trim_right_ratio: float
    codebook_size: int
    codebook_dim: int
    n_codebooks: int
    use_conv_shortcut: bool
    group_norm: bool = False  # norm_type time_group_norm: GroupNorm(1) after each conv
    normalize: bool = False  # each chunk divided by its RMS, the decoded chunk multiplied back
    chunks: ChunkLayout | None = None  # chunk_length_s: overlapping chunks

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsampling_ratios)

    @property
    def audio_scales(self) -> bool:
        """Whether the graphs carry ``audio_scales`` (:mod:`mobius_audio.tasks_codec`)."""
        return self.normalize or self.chunks is not None

    @classmethod
    def from_hf(cls, hf_config: Any) -> EncodecConfig:
        if hf_config.norm_type not in ("weight_norm", "time_group_norm"):
            raise ConfigError(f"encodec norm_type {hf_config.norm_type!r} is not built")
        if hf_config.pad_mode not in PAD_MODES:
            raise ConfigError(
                f"encodec pad_mode {hf_config.pad_mode!r} is not one of {list(PAD_MODES)}"
            )
        ratios = hf_config.upsampling_ratios
        if (
            not isinstance(ratios, (list, tuple))
            or not ratios
            or any(isinstance(r, bool) or not isinstance(r, int) or r <= 0 for r in ratios)
        ):
            raise ConfigError(
                f"encodec upsampling_ratios must be positive integers, got {ratios!r}"
            )
        channels = positive_int(hf_config, "audio_channels")
        if channels > 2:
            raise ConfigError(f"encodec audio_channels {channels}: 1 or 2")
        trim = hf_config.trim_right_ratio
        if isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0 <= trim <= 1:
            raise ConfigError(f"encodec trim_right_ratio {trim!r} is not in [0, 1]")
        codebook_size = positive_int(hf_config, "codebook_size")
        stages = hf_config.num_quantizers  # from the largest target bandwidth
        if stages < 1:
            raise ConfigError(
                f"encodec target_bandwidths {hf_config.target_bandwidths!r} leave no codebook "
                f"at {hf_config.frame_rate} frames/s"
            )
        return cls(
            model_type="encodec",
            channels=channels,
            hidden_size=positive_int(hf_config, "hidden_size"),
            upsampling_ratios=tuple(ratios),
            **seanet_fields(hf_config),
            num_lstm_layers=positive_int(hf_config, "num_lstm_layers"),
            trim_right_ratio=float(trim),
            codebook_size=codebook_size,
            codebook_dim=positive_int(hf_config, "codebook_dim"),
            n_codebooks=int(stages),
            group_norm=hf_config.norm_type == "time_group_norm",
            normalize=bool(hf_config.normalize),
            chunks=_chunk_layout(hf_config, math.prod(ratios)),
        )


def _chunk_layout(hf_config: Any, hop: int) -> ChunkLayout | None:
    """The chunks of ``chunk_length_s`` and ``overlap``, checked: a chunk reaches at most a
    stride into the next (one short chunk at the end, two chunks at most at any sample)."""
    seconds, overlap = hf_config.chunk_length_s, hf_config.overlap
    if seconds is None:
        return None
    for name, value in (("chunk_length_s", seconds), ("overlap", overlap)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"encodec {name} {value!r} must be a number >= 0")
    length, stride = hf_config.chunk_length, hf_config.chunk_stride
    layout = ChunkLayout(length, stride, hop)
    if length < 1 or layout.decoded > 2 * stride:
        raise ConfigError(
            f"encodec chunk_length_s {seconds!r} with overlap {overlap!r}: chunks of {length} "
            f"samples every {stride} overlap by more than a stride (not built)"
        )
    return layout


class EncodecCodebook(nn.Module):
    def __init__(self, config: EncodecConfig) -> None:
        super().__init__()
        self.embed = nn.Parameter([config.codebook_size, config.codebook_dim])

    def forward(self, op):
        return self.embed  # called, so that the parameter joins the graph under its path


class EncodecVectorQuantization(nn.Module):
    def __init__(self, config: EncodecConfig) -> None:
        super().__init__()
        self.codebook = EncodecCodebook(config)

    def forward(self, op, residual=None):
        """Encoding (``residual`` ``[batch, dim, frames]``): the nearest rows' codes ``[batch,
        frames]`` and the rows ``[batch, dim, frames]``. Decoding: the ``[size, dim]`` rows."""
        embed = self.codebook(op)
        if residual is None:
            return embed
        x = op.Transpose(residual, perm=[0, 2, 1])  # [batch, frames, dim]
        two = op.Constant(value=ir.tensor(np.array(2.0, dtype=np.float32)))
        squared = op.ReduceSum(op.Mul(x, x), [-1], keepdims=1)
        dots = op.MatMul(x, op.Transpose(embed, perm=[1, 0]))
        embed_squared = op.ReduceSum(op.Mul(embed, embed), [-1], keepdims=0)
        # -(|x|^2 - 2 x.e + |e|^2), transformers' expression term by term: same arg-max.
        distance = op.Neg(op.Add(op.Sub(squared, op.Mul(two, dots)), embed_squared))
        codes = op.ArgMax(distance, axis=-1, keepdims=0)
        return codes, op.Transpose(op.Gather(embed, codes, axis=0), perm=[0, 2, 1])


class EncodecResidualVectorQuantizer(nn.Module):
    """``n_codebooks`` Euclidean stages (any config with ``codebook_size``, ``codebook_dim``)."""

    #: The checkpoint's name for the list of stages (X-Codec's is ``quantizers``).
    stages_name = "layers"

    def __init__(self, config) -> None:
        super().__init__()
        stages = [EncodecVectorQuantization(config) for _ in range(config.n_codebooks)]
        setattr(self, self.stages_name, nn.ModuleList(stages))

    def forward(self, op, embeddings=None, audio_codes=None):
        """Encoding: int64 ``[batch, n_codebooks, frames]``. Decoding (``audio_codes``
        ``[batch, K, frames]``): the sum of the first ``K`` stages' rows."""
        stages = getattr(self, self.stages_name)
        if audio_codes is not None:
            return sum_of_codebook_rows(op, [layer(op) for layer in stages], audio_codes)
        residual, codes = embeddings, []
        for layer in stages:
            stage_codes, rows = layer(op, residual)
            residual = op.Sub(residual, rows)
            codes.append(op.Unsqueeze(stage_codes, [1]))
        return op.Concat(*codes, axis=1)


class EncodecModel(Model):
    """The audio-codec hooks: ``encode(op, input_values)``, ``decode(op, audio_codes)``."""

    config_class = EncodecConfig
    task = "audio-codec"
    #: The codebooks' training state (k-means flags, usage counts, running sums).
    ignored = (
        "quantizer.layers.*.codebook.inited",
        "quantizer.layers.*.codebook.cluster_size",
        "quantizer.layers.*.codebook.embed_avg",
    )

    def __init__(self, config: EncodecConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = EncodecEncoder(config)
        self.quantizer = EncodecResidualVectorQuantizer(config)
        self.decoder = EncodecDecoder(config)

    def encode(self, op, input_values):
        """``[batch, channels, samples]`` -> int64 ``[batch, n_codebooks, ceil(samples / hop)]``;
        with ``audio_scales`` (normalised or chunked), also the scales ``[batch, chunks]``."""
        layout = self.config.chunks
        if layout is None:
            codes, scale = self._encode_chunk(op, input_values)
            return codes if not self.config.audio_scales else (codes, op.Unsqueeze(scale, [1]))
        whole, count = whole_chunks(op, input_values, layout)
        codes, scales = self._encode_chunk(op, whole)  # [b * n, K, F], [b * n]
        codes = frames_by_chunk(op, codes, count, layout)
        scales = op.Reshape(scales, op.Concat(op.Constant(value_ints=[-1]), count, axis=0))
        if layout.tail:
            tail_codes, tail_scale = self._encode_chunk(op, tail_chunk(op, input_values, layout))
            codes = op.Concat(codes, tail_codes, axis=2)
            scales = op.Concat(scales, op.Unsqueeze(tail_scale, [1]), axis=1)
        return codes, scales

    def _encode_chunk(self, op, chunk):
        """One chunk's codes and its scale ``[batch]`` (ones when not normalised)."""
        one = ir.tensor(np.array([1.0], dtype=np.float32))
        scale = op.ConstantOfShape(op.Shape(chunk, start=0, end=1), value=one)
        if self.config.normalize:
            channels = op.Cast(op.Shape(chunk, start=1, end=2), to=ir.DataType.FLOAT)
            mono = op.Div(op.ReduceSum(chunk, [1], keepdims=1), channels)
            tiny = op.Constant(value=ir.tensor(np.array(1e-8, dtype=np.float32)))
            rms = op.Sqrt(op.ReduceMean(op.Mul(mono, mono), [-1], keepdims=1))
            scale = op.Add(rms, tiny)  # [batch, 1, 1]
            chunk = op.Div(chunk, scale)
            scale = op.Reshape(scale, op.Constant(value_ints=[-1]))
        return self.quantizer(op, self.encoder(op, chunk)), scale

    def decode(self, op, audio_codes, audio_scales=None):
        """``[batch, K, frames]`` (``K <= n_codebooks``) -> ``[batch, channels, frames * hop]``;
        chunked: the decoded chunks scaled by ``audio_scales`` ``[batch, chunks]`` and cross-faded."""
        layout = self.config.chunks
        if layout is None:
            audio = self._decode_chunk(op, audio_codes)
            if audio_scales is None:
                return audio
            return op.Mul(audio, op.Unsqueeze(audio_scales, [2]))
        count = op.Shape(audio_scales, start=1, end=2)
        if layout.tail:
            count = op.Sub(count, op.Constant(value_ints=[1]))
        whole, tail = chunk_codes(op, audio_codes, count, layout)
        scales = op.Slice(
            audio_scales, op.Constant(value_ints=[0]), count, op.Constant(value_ints=[1])
        )
        decoded = op.Mul(
            self._decode_chunk(op, whole), op.Reshape(scales, op.Constant(value_ints=[-1, 1, 1]))
        )
        if tail is not None:
            tail_scale = op.Slice(
                audio_scales,
                op.Constant(value_ints=[-1]),
                op.Constant(value_ints=[2**62]),
                op.Constant(value_ints=[1]),
            )
            tail = op.Mul(self._decode_chunk(op, tail), op.Unsqueeze(tail_scale, [2]))
        return overlap_add(op, decoded, tail, count, layout)

    def _decode_chunk(self, op, audio_codes):
        return self.decoder(op, self.quantizer(op, audio_codes=audio_codes))

    def sanitize(self, weights: dict) -> dict:
        """Weight-normalised convolutions folded (both spellings: ``weight_g``/``weight_v``,
        ``parametrizations.weight.original0``/``original1``)."""
        return fold_weight_norm(weights)


MODEL_TYPES = {"encodec": EncodecModel}
