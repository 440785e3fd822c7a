"""DAC (Descript Audio Codec): a Snake-activated conv encoder, factorised residual codebooks, a conv decoder.

The module tree follows ``DacModel`` checkpoints (``encoder.block.0.res_unit1.
conv1``, ``quantizer.quantizers.0.in_proj``, ``decoder.block.0.conv_t1``...).
Each quantizer projects the residual to ``codebook_dim`` channels (``in_proj``),
picks the codebook row nearest in cosine terms (both sides L2-normalised, the
distance written as transformers writes it, so the arg-max is the same), and adds
that row, projected back (``out_proj``), to the quantized sum. The audio codec
contract is :mod:`mobius_audio.tasks_codec`.
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
from mobius_audio.models._codec import (
    CodecConv1d,
    CodecConvTranspose1d,
    fold_weight_norm,
    sum_of_codebook_rows,
)


def _strides(hf_config: Any, name: str) -> tuple[int, ...]:
    ratios = getattr(hf_config, name, None)
    if not isinstance(ratios, (list, tuple)) or not ratios:
        raise ConfigError(f"dac {name} must be a list of strides, got {ratios!r}")
    if any(isinstance(r, bool) or not isinstance(r, int) or r <= 0 for r in ratios):
        raise ConfigError(f"dac {name} must be positive integers, got {ratios!r}")
    return tuple(ratios)


@dataclass
class DacConfig:
    model_type: str
    encoder_hidden_size: int
    downsampling_ratios: tuple[int, ...]
    decoder_hidden_size: int
    n_codebooks: int
    codebook_size: int
    codebook_dim: int
    sampling_rate: int
    #: The latent channels (the encoder's last conv out, the decoder's first in); DacConfig
    #: sets it to ``encoder_width``, X-Codec's acoustic config to a value of its own.
    hidden_size: int = 0
    #: The decoder's strides: ``downsampling_ratios`` reversed unless the config says otherwise.
    upsampling_ratios: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.hidden_size = self.hidden_size or self.encoder_width
        self.upsampling_ratios = self.upsampling_ratios or self.downsampling_ratios[::-1]

    @property
    def encoder_width(self) -> int:
        """The encoder's channels after its doublings."""
        return self.encoder_hidden_size * 2 ** len(self.downsampling_ratios)

    @property
    def hop_length(self) -> int:
        """Samples per code frame."""
        return math.prod(self.downsampling_ratios)

    @property
    def channels(self) -> int:
        return 1  # DAC is mono

    @classmethod
    def from_hf(cls, hf_config: Any) -> DacConfig:
        ratios = _strides(hf_config, "downsampling_ratios")
        upsampling = getattr(hf_config, "upsampling_ratios", None)
        upsampling = (
            ratios[::-1] if upsampling is None else _strides(hf_config, "upsampling_ratios")
        )
        hidden_size = getattr(hf_config, "hidden_size", None)
        config = cls(
            model_type="dac",
            encoder_hidden_size=positive_int(hf_config, "encoder_hidden_size"),
            downsampling_ratios=tuple(ratios),
            decoder_hidden_size=positive_int(hf_config, "decoder_hidden_size"),
            n_codebooks=positive_int(hf_config, "n_codebooks"),
            codebook_size=positive_int(hf_config, "codebook_size"),
            codebook_dim=positive_int(hf_config, "codebook_dim"),
            sampling_rate=positive_int(hf_config, "sampling_rate"),
            hidden_size=0 if hidden_size is None else positive_int(hf_config, "hidden_size"),
            upsampling_ratios=upsampling,
        )
        if config.decoder_hidden_size % 2 ** len(upsampling):
            raise ConfigError(
                f"dac decoder_hidden_size {config.decoder_hidden_size} must halve "
                f"{len(upsampling)} times (once per upsampling block)"
            )
        return config


class Snake1d(nn.Module):
    """``x + sin(alpha * x)^2 / (alpha + 1e-9)`` per channel, ``alpha`` ``[1, channels, 1]``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter([1, channels, 1])

    def forward(self, op, x):
        tiny = op.Constant(value=ir.tensor(np.array(1e-9, dtype=np.float32)))
        inverse = op.Reciprocal(op.Add(self.alpha, tiny))
        wave = op.Sin(op.Mul(self.alpha, x))
        return op.Add(x, op.Mul(inverse, op.Mul(wave, wave)))


class DacResidualUnit(nn.Module):
    """Snake, a dilated kernel-7 conv (length kept), Snake, a 1x1 conv; added to the input."""

    def __init__(self, channels: int, dilation: int) -> None:
        super().__init__()
        self.snake1 = Snake1d(channels)
        self.conv1 = CodecConv1d(channels, channels, 7, dilation=dilation, pad=3 * dilation)
        self.snake2 = Snake1d(channels)
        self.conv2 = CodecConv1d(channels, channels, 1)

    def forward(self, op, x):
        y = self.conv2(op, self.snake2(op, self.conv1(op, self.snake1(op, x))))
        return op.Add(x, y)


def _residual_units(channels: int):
    return [DacResidualUnit(channels, dilation) for dilation in (1, 3, 9)]


class DacEncoderBlock(nn.Module):
    """Three residual units at ``channels // 2``, Snake, then a strided conv doubling the channels."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.res_unit1, self.res_unit2, self.res_unit3 = _residual_units(channels // 2)
        self.snake1 = Snake1d(channels // 2)
        self.conv1 = CodecConv1d(
            channels // 2, channels, 2 * stride, stride=stride, pad=math.ceil(stride / 2)
        )

    def forward(self, op, x):
        for unit in (self.res_unit1, self.res_unit2, self.res_unit3):
            x = unit(op, x)
        return self.conv1(op, self.snake1(op, x))


class DacDecoderBlock(nn.Module):
    """Snake, a strided transposed conv halving the channels, three residual units."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.snake1 = Snake1d(cin)
        crop = math.ceil(stride / 2)
        self.conv_t1 = CodecConvTranspose1d(cin, cout, 2 * stride, stride=stride, pads=(crop, crop))
        self.res_unit1, self.res_unit2, self.res_unit3 = _residual_units(cout)

    def forward(self, op, x):
        x = self.conv_t1(op, self.snake1(op, x))
        for unit in (self.res_unit1, self.res_unit2, self.res_unit3):
            x = unit(op, x)
        return x


class DacEncoder(nn.Module):
    def __init__(self, config: DacConfig) -> None:
        super().__init__()
        width = config.encoder_hidden_size
        self.conv1 = CodecConv1d(1, width, 7, pad=3)
        self.block = nn.ModuleList(
            [
                DacEncoderBlock(width * 2 ** (i + 1), stride)
                for i, stride in enumerate(config.downsampling_ratios)
            ]
        )
        self.snake1 = Snake1d(config.encoder_width)
        self.conv2 = CodecConv1d(config.encoder_width, config.hidden_size, 3, pad=1)

    def forward(self, op, x):  # [batch, 1, samples] -> [batch, hidden, frames]
        x = self.conv1(op, x)
        for block in self.block:
            x = block(op, x)
        return self.conv2(op, self.snake1(op, x))


class DacDecoder(nn.Module):
    block_class = DacDecoderBlock

    def __init__(self, config: DacConfig) -> None:
        super().__init__()
        width = config.decoder_hidden_size
        self.conv1 = CodecConv1d(config.hidden_size, width, 7, pad=3)
        strides = config.upsampling_ratios
        self.block = nn.ModuleList(
            [
                self.block_class(width // 2**i, width // 2 ** (i + 1), stride)
                for i, stride in enumerate(strides)
            ]
        )
        out = width // 2 ** len(strides)
        self.snake1 = Snake1d(out)
        self.conv2 = CodecConv1d(out, 1, 7, pad=3)

    def forward(self, op, x):  # [batch, hidden, frames] -> [batch, 1, samples]
        x = self.conv1(op, x)
        for block in self.block:
            x = block(op, x)
        return self.activation(op, self.conv2(op, self.snake1(op, x)))

    def activation(self, op, x):
        """DAC bounds its output with ``tanh``."""
        return op.Tanh(x)


def _l2_normalized(op, x):
    """``F.normalize(x, dim=-1)``: ``x / max(||x||, 1e-12)``."""
    eps = op.Constant(value=ir.tensor(np.array(1e-12, dtype=np.float32)))
    return op.Div(x, op.Max(op.ReduceL2(x, [-1], keepdims=1), eps))


class Codebook(nn.Module):
    """The ``[codebook_size, codebook_dim]`` rows of one quantizer (``nn.Embedding``'s ``weight``)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([size, dim])

    def forward(self, op):
        return self.weight  # called, so that the parameter joins the graph under its path


class DacVectorQuantize(nn.Module):
    def __init__(self, config: DacConfig) -> None:
        super().__init__()
        self.in_proj = CodecConv1d(config.hidden_size, config.codebook_dim, 1)
        self.out_proj = CodecConv1d(config.codebook_dim, config.hidden_size, 1)
        self.codebook = Codebook(config.codebook_size, config.codebook_dim)

    def forward(self, op, residual=None):
        """Encoding (``residual`` given): the stage's codes ``[batch, frames]`` and its
        quantized contribution ``[batch, hidden, frames]``. Decoding (no residual): the
        ``[codebook_size, hidden]`` table of each row through ``out_proj``."""
        table = self.codebook(op)
        if residual is None:
            rows = op.Unsqueeze(op.Transpose(table, perm=[1, 0]), [0])  # [1, dim, size]
            return op.Transpose(op.Squeeze(self.out_proj(op, rows), [0]), perm=[1, 0])
        latents = self.in_proj(op, residual)  # [batch, codebook_dim, frames]
        encodings = _l2_normalized(op, op.Transpose(latents, perm=[0, 2, 1]))
        codebook = _l2_normalized(op, table)  # [size, dim]
        squared = op.ReduceSum(op.Mul(encodings, encodings), [-1], keepdims=1)  # [b, f, 1]
        two = op.Constant(value=ir.tensor(np.array(2.0, dtype=np.float32)))
        dots = op.MatMul(encodings, op.Transpose(codebook, perm=[1, 0]))  # [b, f, size]
        codebook_squared = op.ReduceSum(op.Mul(codebook, codebook), [-1], keepdims=0)  # [size]
        # -(|e|^2 - 2 e.c) + |c|^2, transformers' expression term by term: same arg-max.
        distance = op.Add(op.Neg(op.Sub(squared, op.Mul(two, dots))), codebook_squared)
        codes = op.ArgMax(distance, axis=-1, keepdims=0)  # [batch, frames]
        rows = op.Transpose(op.Gather(table, codes, axis=0), perm=[0, 2, 1])
        # transformers' straight-through sum latents + (rows - latents), rounded as it rounds.
        quantized = op.Add(latents, op.Sub(rows, latents))
        return codes, self.out_proj(op, quantized)


class DacResidualVectorQuantizer(nn.Module):
    def __init__(self, config: DacConfig) -> None:
        super().__init__()
        self.quantizers = nn.ModuleList(
            [DacVectorQuantize(config) for _ in range(config.n_codebooks)]
        )

    def forward(self, op, latents=None, audio_codes=None):
        """Encoding: int64 ``[batch, n_codebooks, frames]``, each stage quantizing what the
        earlier left. Decoding (``audio_codes`` ``[batch, K, frames]``): the sum of the
        first ``K`` stages' projected rows, ``[batch, hidden, frames]``."""
        if audio_codes is not None:
            tables = [quantizer(op) for quantizer in self.quantizers]
            return sum_of_codebook_rows(op, tables, audio_codes)
        residual, codes = latents, []
        for quantizer in self.quantizers:
            stage_codes, quantized = quantizer(op, residual)
            residual = op.Sub(residual, quantized)
            codes.append(op.Unsqueeze(stage_codes, [1]))
        return op.Concat(*codes, axis=1)


class DacModel(Model):
    """The audio-codec hooks: ``encode(op, input_values)``, ``decode(op, audio_codes)``."""

    config_class = DacConfig
    task = "audio-codec"

    def __init__(self, config: DacConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = DacEncoder(config)
        self.quantizer = DacResidualVectorQuantizer(config)
        self.decoder = DacDecoder(config)

    def encode(self, op, input_values):
        """``input_values`` ``[batch, 1, samples]`` -> ``audio_codes`` int64 ``[batch, n_codebooks, frames]``."""
        return self.quantizer(op, self.encoder(op, input_values))

    def decode(self, op, audio_codes):
        """``audio_codes`` ``[batch, K, frames]`` (``K <= n_codebooks``) -> ``[batch, 1, samples]``."""
        return self.decoder(op, self.quantizer(op, audio_codes=audio_codes))

    def sanitize(self, weights: dict) -> dict:
        """Weight-normalised convolutions (as DAC's own checkpoints store them) folded."""
        return fold_weight_norm(weights)


MODEL_TYPES = {"dac": DacModel}
