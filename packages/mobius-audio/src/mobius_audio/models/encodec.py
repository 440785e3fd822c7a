"""EnCodec: a SEANet conv encoder with an LSTM, Euclidean residual codebooks, a mirrored decoder.

The module tree follows ``EncodecModel`` checkpoints (``encoder.layers.0.conv``,
``encoder.layers.1.block.1.conv``, ``encoder.layers.13.lstm.weight_ih_l0``,
``quantizer.layers.0.codebook.embed``...). Convolutions pad as transformers'
``EncodecConv1d`` does: the ``kernel - stride`` samples of padding all on the left
(causal) or split, plus the few on the right that make the last window whole, in
the config's ``pad_mode``. Each quantizer picks the nearest row in Euclidean
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
from mobius_audio.models._codec import (
    CodecConv1d,
    CodecConvTranspose1d,
    fold_weight_norm,
    sum_of_codebook_rows,
)
from mobius_audio.models._codec_chunks import (
    ChunkLayout,
    chunk_codes,
    frames_by_chunk,
    overlap_add,
    tail_chunk,
    whole_chunks,
)

#: ``pad_mode`` (torch's ``F.pad`` mode) -> ONNX ``Pad``'s mode.
_PAD_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge"}


def seanet_fields(hf_config) -> dict:
    """The SEANet conv stack's settings an EnCodec-style config holds (EnCodec's, Mimi's),
    each checked."""
    names = ("num_filters", "num_residual_layers", "kernel_size", "last_kernel_size",
             "residual_kernel_size", "dilation_growth_rate", "compress")  # fmt: skip
    return {
        **{name: positive_int(hf_config, name) for name in names},
        "use_causal_conv": bool(hf_config.use_causal_conv),
        "pad_mode": hf_config.pad_mode,
        "use_conv_shortcut": bool(hf_config.use_conv_shortcut),
    }


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
        if hf_config.pad_mode not in _PAD_MODES:
            raise ConfigError(
                f"encodec pad_mode {hf_config.pad_mode!r} is not one of {list(_PAD_MODES)}"
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


def _scalar(op, value: int):
    return op.Constant(value=ir.tensor(np.array([value], dtype=np.int64)))


class EncodecConv1d(nn.Module):
    """A conv padded so that every input sample is covered: ``ceil(length / stride)`` outputs."""

    def __init__(
        self,
        config: EncodecConfig,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
    ) -> None:
        super().__init__()
        self.conv = CodecConv1d(cin, cout, kernel, stride=stride, dilation=dilation)
        self.norm = TimeGroupNorm(cout) if config.group_norm else None
        self.stride = stride
        self.padding_total = (kernel - 1) * dilation + 1 - stride
        self.causal, self.pad_mode = config.use_causal_conv, _PAD_MODES[config.pad_mode]

    def forward(self, op, x):
        length = op.Shape(x, start=2, end=3)
        stride = _scalar(op, self.stride)
        extra = op.Sub(
            op.Mul(op.Div(op.Add(length, _scalar(op, self.stride - 1)), stride), stride), length
        )
        total = self.padding_total
        right = 0 if self.causal else total // 2
        left = total - right
        x = self._pad(op, x, _scalar(op, left), op.Add(_scalar(op, right), extra))
        x = self.conv(op, x)
        return x if self.norm is None else self.norm(op, x)

    def _pad(self, op, x, left, right):
        """``F.pad`` in the config's mode; reflection over an input no longer than the
        padding first zero-pads it on the right, as transformers does."""
        axes = op.Constant(value_ints=[2])
        if self.pad_mode != "reflect":
            return op.Pad(x, op.Concat(left, right, axis=0), None, axes, mode=self.pad_mode)
        length = op.Shape(x, start=2, end=3)
        most = op.Max(left, right)  # reflecting `most` samples needs `most + 1`
        short = op.Max(op.Sub(op.Add(most, _scalar(op, 1)), length), _scalar(op, 0))
        x = op.Pad(x, op.Concat(_scalar(op, 0), short, axis=0), None, axes)
        x = op.Pad(x, op.Concat(left, right, axis=0), None, axes, mode="reflect")
        end = op.Sub(op.Shape(x, start=2, end=3), short)
        return op.Slice(x, _scalar(op, 0), end, axes)


class EncodecConvTranspose1d(nn.Module):
    """A transposed conv cropped by ``kernel - stride`` samples: on the right (causal) or split."""

    def __init__(
        self, config: EncodecConfig, cin: int, cout: int, kernel: int, stride: int
    ) -> None:
        super().__init__()
        total = kernel - stride
        right = math.ceil(total * config.trim_right_ratio) if config.use_causal_conv else total // 2
        self.crop = (total - right, right)
        self.norm = TimeGroupNorm(cout) if config.group_norm else None
        # the group norm sees the uncropped output, as in transformers: crop after it
        pads = (0, 0) if self.norm is not None else self.crop
        self.conv = CodecConvTranspose1d(cin, cout, kernel, stride=stride, pads=pads)

    def forward(self, op, x):
        x = self.conv(op, x)
        if self.norm is None:
            return x
        x = self.norm(op, x)
        end = op.Sub(op.Shape(x, start=2, end=3), _scalar(op, self.crop[1]))
        return op.Slice(x, _scalar(op, self.crop[0]), end, _scalar(op, 2))


class TimeGroupNorm(nn.Module):
    """``GroupNorm(1, channels)``: each example normalised over channels and time, then scaled
    and shifted per channel."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels])
        self.bias = nn.Parameter([channels])
        self.eps = eps

    def forward(self, op, x):
        centred = op.Sub(x, op.ReduceMean(x, [1, 2], keepdims=1))
        variance = op.ReduceMean(op.Mul(centred, centred), [1, 2], keepdims=1)
        eps = op.Constant(value=ir.tensor(np.array(self.eps, dtype=np.float32)))
        normed = op.Div(centred, op.Sqrt(op.Add(variance, eps)))
        scale, shift = op.Unsqueeze(self.weight, [1]), op.Unsqueeze(self.bias, [1])
        return op.Add(op.Mul(normed, scale), shift)


class _Lstm(nn.Module):
    """``torch.nn.LSTM`` (time-major) as ONNX ``LSTM`` ops, one per layer.

    torch stacks the gates ``input, forget, cell, output``; ONNX wants ``input,
    output, forget, cell``: the checkpoint's tensors keep their names and are
    reordered in the graph.
    """

    def __init__(self, size: int, layers: int) -> None:
        super().__init__()
        self.size, self.layers = size, layers
        for i in range(layers):
            setattr(self, f"weight_ih_l{i}", nn.Parameter([4 * size, size]))
            setattr(self, f"weight_hh_l{i}", nn.Parameter([4 * size, size]))
            setattr(self, f"bias_ih_l{i}", nn.Parameter([4 * size]))
            setattr(self, f"bias_hh_l{i}", nn.Parameter([4 * size]))

    def _onnx_gates(self, op, tensor):
        i, f, g, o = op.Split(tensor, num_outputs=4, axis=0, _outputs=4)
        return op.Concat(i, o, f, g, axis=0)

    def forward(self, op, x):  # [time, batch, size]
        for i in range(self.layers):
            w = op.Unsqueeze(self._onnx_gates(op, getattr(self, f"weight_ih_l{i}")), [0])
            r = op.Unsqueeze(self._onnx_gates(op, getattr(self, f"weight_hh_l{i}")), [0])
            biases = [
                self._onnx_gates(op, getattr(self, f"{kind}_l{i}"))
                for kind in ("bias_ih", "bias_hh")
            ]
            b = op.Unsqueeze(op.Concat(*biases, axis=0), [0])
            y, _, _ = op.LSTM(x, w, r, b, hidden_size=self.size, _outputs=3)
            x = op.Squeeze(y, [1])  # [time, 1 direction, batch, size] -> [time, batch, size]
        return x


class EncodecLSTM(nn.Module):
    """The LSTM over time with a skip connection, on a ``[batch, channels, time]`` tensor."""

    def __init__(self, config: EncodecConfig, size: int) -> None:
        super().__init__()
        self.lstm = _Lstm(size, config.num_lstm_layers)

    def forward(self, op, x):
        sequence = op.Transpose(x, perm=[2, 0, 1])
        return op.Transpose(op.Add(self.lstm(op, sequence), sequence), perm=[1, 2, 0])


class _Elu(nn.Module):
    def forward(self, op, x):
        return op.Elu(x, alpha=1.0)


class EncodecResnetBlock(nn.Module):
    """ELU, a dilated conv to ``dim // compress``, ELU, a 1x1 conv back; plus the (conv) shortcut."""

    def __init__(self, config: EncodecConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // config.compress
        self.block = nn.ModuleList(
            [
                _Elu(),
                EncodecConv1d(config, dim, hidden, config.residual_kernel_size, dilation=dilation),
                _Elu(),
                EncodecConv1d(config, hidden, dim, 1),
            ]
        )
        self.shortcut = EncodecConv1d(config, dim, dim, 1) if config.use_conv_shortcut else None

    def forward(self, op, x):
        y = x
        for layer in self.block:
            y = layer(op, y)
        return op.Add(x if self.shortcut is None else self.shortcut(op, x), y)


class _Layers(nn.Module):
    """transformers' flat ``layers`` list (so that the checkpoint's indices are the module's)."""

    def __init__(self, layers: list) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, op, x):
        for layer in self.layers:
            x = layer(op, x)
        return x


class EncodecEncoder(_Layers):
    def __init__(self, config: EncodecConfig) -> None:
        f = config.num_filters
        layers = [EncodecConv1d(config, config.channels, f, config.kernel_size)]
        scaling = 1
        for ratio in reversed(config.upsampling_ratios):
            dim = scaling * f
            layers += [
                EncodecResnetBlock(config, dim, config.dilation_growth_rate**j)
                for j in range(config.num_residual_layers)
            ]
            layers += [_Elu(), EncodecConv1d(config, dim, dim * 2, ratio * 2, stride=ratio)]
            scaling *= 2
        layers += [
            *self.bottleneck(config, scaling * f),
            _Elu(),
            EncodecConv1d(config, scaling * f, config.hidden_size, config.last_kernel_size),
        ]
        super().__init__(layers)

    def bottleneck(self, config: EncodecConfig, dim: int) -> list:
        """The layers at the latent end: EnCodec's LSTM (Mimi, a subclass, has none)."""
        return [EncodecLSTM(config, dim)]


class EncodecDecoder(_Layers):
    def __init__(self, config: EncodecConfig) -> None:
        f = config.num_filters
        scaling = 2 ** len(config.upsampling_ratios)
        layers = [
            EncodecConv1d(config, config.hidden_size, scaling * f, config.kernel_size),
            *self.bottleneck(config, scaling * f),
        ]
        for ratio in config.upsampling_ratios:
            dim = scaling * f
            layers += [_Elu(), EncodecConvTranspose1d(config, dim, dim // 2, ratio * 2, ratio)]
            layers += [
                EncodecResnetBlock(config, dim // 2, config.dilation_growth_rate**j)
                for j in range(config.num_residual_layers)
            ]
            scaling //= 2
        layers += [_Elu(), EncodecConv1d(config, f, config.channels, config.last_kernel_size)]
        super().__init__(layers)

    def bottleneck(self, config: EncodecConfig, dim: int) -> list:
        """The layers at the latent end: EnCodec's LSTM (Mimi, a subclass, has none)."""
        return [EncodecLSTM(config, dim)]


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
