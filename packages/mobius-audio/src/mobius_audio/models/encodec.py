"""EnCodec: a SEANet conv encoder with an LSTM, Euclidean residual codebooks, a mirrored decoder.

The module tree follows ``EncodecModel`` checkpoints (``encoder.layers.0.conv``,
``encoder.layers.1.block.1.conv``, ``encoder.layers.13.lstm.weight_ih_l0``,
``quantizer.layers.0.codebook.embed``...). Convolutions pad as transformers'
``EncodecConv1d`` does: the ``kernel - stride`` samples of padding all on the left
(causal) or split, plus the few on the right that make the last window whole, in
the config's ``pad_mode``. Each quantizer picks the nearest row in Euclidean
distance and subtracts it from the residual; the decoder sums the chosen rows.

Built: one chunk, unnormalised, weight-normalised convolutions (``facebook/
encodec_24khz``). Refused, each with its reason: ``chunk_length_s`` (the 48 kHz
model's overlapping chunks), ``normalize`` (per-chunk scales) and ``norm_type``
``time_group_norm``. The audio codec contract is :mod:`mobius_audio.tasks_codec`.
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
from mobius_audio.models._codec import (
    CodecConv1d,
    CodecConvTranspose1d,
    fold_weight_norm,
    sum_of_codebook_rows,
)

#: ``pad_mode`` (torch's ``F.pad`` mode) -> ONNX ``Pad``'s mode.
_PAD_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge"}


def _positive_int(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"encodec {name} must be a positive integer, got {value!r}")
    return value


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

    @property
    def hop_length(self) -> int:
        return math.prod(self.upsampling_ratios)

    @classmethod
    def from_hf(cls, hf_config: Any) -> EncodecConfig:
        for name, reason in (
            ("chunk_length_s", "overlapping chunks (the 48 kHz model) are not built"),
            ("normalize", "per-clip scales (audio_scales) are not built"),
        ):
            if getattr(hf_config, name, None):
                raise ConfigError(f"encodec {name}={getattr(hf_config, name)!r}: {reason}")
        if hf_config.norm_type != "weight_norm":
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
        channels = _positive_int(hf_config, "audio_channels")
        if channels > 2:
            raise ConfigError(f"encodec audio_channels {channels}: 1 or 2")
        trim = hf_config.trim_right_ratio
        if isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0 <= trim <= 1:
            raise ConfigError(f"encodec trim_right_ratio {trim!r} is not in [0, 1]")
        codebook_size = _positive_int(hf_config, "codebook_size")
        stages = hf_config.num_quantizers  # from the largest target bandwidth
        if stages < 1:
            raise ConfigError(
                f"encodec target_bandwidths {hf_config.target_bandwidths!r} leave no codebook "
                f"at {hf_config.frame_rate} frames/s"
            )
        return cls(
            model_type="encodec",
            channels=channels,
            hidden_size=_positive_int(hf_config, "hidden_size"),
            num_filters=_positive_int(hf_config, "num_filters"),
            num_residual_layers=_positive_int(hf_config, "num_residual_layers"),
            upsampling_ratios=tuple(ratios),
            kernel_size=_positive_int(hf_config, "kernel_size"),
            last_kernel_size=_positive_int(hf_config, "last_kernel_size"),
            residual_kernel_size=_positive_int(hf_config, "residual_kernel_size"),
            dilation_growth_rate=_positive_int(hf_config, "dilation_growth_rate"),
            use_causal_conv=bool(hf_config.use_causal_conv),
            pad_mode=hf_config.pad_mode,
            compress=_positive_int(hf_config, "compress"),
            num_lstm_layers=_positive_int(hf_config, "num_lstm_layers"),
            trim_right_ratio=float(trim),
            codebook_size=codebook_size,
            codebook_dim=_positive_int(hf_config, "codebook_dim"),
            n_codebooks=int(stages),
            use_conv_shortcut=bool(hf_config.use_conv_shortcut),
        )


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
        return self.conv(op, x)

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
        self.conv = CodecConvTranspose1d(
            cin, cout, kernel, stride=stride, pads=(total - right, right)
        )

    def forward(self, op, x):
        return self.conv(op, x)


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
            EncodecLSTM(config, scaling * f),
            _Elu(),
            EncodecConv1d(config, scaling * f, config.hidden_size, config.last_kernel_size),
        ]
        super().__init__(layers)


class EncodecDecoder(_Layers):
    def __init__(self, config: EncodecConfig) -> None:
        f = config.num_filters
        scaling = 2 ** len(config.upsampling_ratios)
        layers = [
            EncodecConv1d(config, config.hidden_size, scaling * f, config.kernel_size),
            EncodecLSTM(config, scaling * f),
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
    def __init__(self, config: EncodecConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [EncodecVectorQuantization(config) for _ in range(config.n_codebooks)]
        )

    def forward(self, op, embeddings=None, audio_codes=None):
        """Encoding: int64 ``[batch, n_codebooks, frames]``. Decoding (``audio_codes``
        ``[batch, K, frames]``): the sum of the first ``K`` stages' rows."""
        if audio_codes is not None:
            return sum_of_codebook_rows(op, [layer(op) for layer in self.layers], audio_codes)
        residual, codes = embeddings, []
        for layer in self.layers:
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
        """``[batch, channels, samples]`` -> int64 ``[batch, n_codebooks, ceil(samples / hop)]``."""
        return self.quantizer(op, self.encoder(op, input_values))

    def decode(self, op, audio_codes):
        """``[batch, K, frames]`` (``K <= n_codebooks``) -> ``[batch, channels, frames * hop]``."""
        return self.decoder(op, self.quantizer(op, audio_codes=audio_codes))

    def sanitize(self, weights: dict) -> dict:
        """Weight-normalised convolutions folded (both spellings: ``weight_g``/``weight_v``,
        ``parametrizations.weight.original0``/``original1``)."""
        return fold_weight_norm(weights)


MODEL_TYPES = {"encodec": EncodecModel}
