"""SEANet: the conv encoder and mirrored decoder of EnCodec, shared by Mimi and Bark's codec.

The module tree follows ``EncodecModel`` checkpoints (``encoder.layers.0.conv``,
``encoder.layers.1.block.1.conv``, ``encoder.layers.13.lstm.weight_ih_l0``...).
Convolutions pad as transformers' ``EncodecConv1d`` does: the ``kernel - stride``
samples of padding all on the left (causal) or split, plus the few on the right that
make the last window whole, in the config's ``pad_mode``. A config is an
:class:`~mobius_audio.models.encodec.EncodecConfig` (or one with its fields).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius_audio.models._checks import positive_int
from mobius_audio.models._codec import CodecConv1d, CodecConvTranspose1d

if TYPE_CHECKING:
    from mobius_audio.models.encodec import EncodecConfig

#: ``pad_mode`` (torch's ``F.pad`` mode) -> ONNX ``Pad``'s mode.
PAD_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge"}


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
        self.causal, self.pad_mode = config.use_causal_conv, PAD_MODES[config.pad_mode]

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
