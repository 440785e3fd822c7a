"""MobileNet-V5, Gemma 3n's vision tower (timm's ``mobilenetv5_300m_enc``), as ONNX.

transformers wraps the timm model (``TimmWrapperModel``), so the checkpoint names are
timm's under ``timm_model.`` and the layout is timm's architecture string, not a
config field: this module spells out that one architecture (the only one Gemma 3n
checkpoints use), scaled by the ``model_args`` transformers passes to
``timm.create_model`` (``channel_multiplier``, ``msfa_output_resolution``).

- A stride-2 stem, then four stages of edge-residual (ER), universal inverted
  residual (UIR) and mobile multi-query attention (MQA) blocks; every norm is an RMS
  norm over the channels, activations are tanh-GELU, convolutions are TF "same"-padded.
- The multi-scale fusion adapter (MSFA) upsamples the last stage to the size of the
  one before (nearest), concatenates both, runs a UIR feed-forward and average-pools
  to ``msfa_output_resolution`` square. transformers' processor resizes every image
  to one size whose 1/16 is a multiple of that resolution (768 -> 48 -> 16); other
  sizes, which timm would resize bilinearly, are not supported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, get_activation
from mobius.errors import ConfigError
from mobius_vision.models._conv import Identity
from mobius_vision.models.mobilenet_v2 import make_divisible

#: The architecture transformers' Gemma 3n vision config names.
ARCHITECTURE = "mobilenetv5_300m_enc"
#: ``model_args`` keys this module honours, with their types.
MODEL_ARGS = {"channel_multiplier": (int, float), "msfa_output_resolution": int}

# Block specs of mobilenetv5_300m_enc, per stage.
# ("er", kernel, stride, expansion, channels)
# ("uir", start_kernel, mid_kernel, stride, expansion, channels); kernel 0: no such conv
# ("mqa", kv_kernel, heads, kv_stride, key_dim, channels)
_MQA_STAGE2 = [("mqa", 3, 12, 2, 64, 640), ("uir", 0, 0, 1, 2, 640)] * 14
_MQA_STAGE3 = [("mqa", 3, 16, 1, 96, 1280), ("uir", 0, 0, 1, 2, 1280)] * 19
STAGES = [
    [("er", 3, 2, 4, 128), ("er", 3, 1, 4, 128), ("er", 3, 1, 4, 128)],
    [("uir", 3, 5, 2, 6, 256)] + [("uir", a, 0, 1, 4, 256) for a in (5, 3, 5, 3)],
    [("uir", 5, 5, 2, 6, 640)]
    + [("uir", 5, 0, 1, 4, 640)] * 7
    + [("uir", 0, 0, 1, 1, 640)]
    + _MQA_STAGE2,
    [("uir", 5, 5, 2, 6, 1280)] + _MQA_STAGE3,
]
STEM_CHANNELS = 64
#: The MSFA fuses the outputs of the last two stages.
MSFA_STAGES = (2, 3)


@dataclass
class MobileNetV5Config:
    """The tower's settings: the architecture's scaling and the adapter's output."""

    hidden_size: int = 2048  # timm's encoder always ends in 2048 channels
    channel_multiplier: float = 1.0
    msfa_output_resolution: int = 16
    num_channels: int = 3
    eps: float = 1e-6

    @classmethod
    def from_hf(cls, vision_config: Any) -> MobileNetV5Config:
        """Read transformers' ``Gemma3nVisionConfig`` (a timm wrapper config); refuse what differs."""
        architecture = getattr(vision_config, "architecture", None)
        if architecture != ARCHITECTURE:
            raise ConfigError(
                f"gemma3n: vision architecture {architecture!r} is not {ARCHITECTURE}"
            )
        if vision_config.hidden_size != cls.hidden_size:
            raise ConfigError(
                f"gemma3n: vision hidden_size {vision_config.hidden_size} is not the "
                f"{cls.hidden_size} channels {ARCHITECTURE} outputs"
            )
        args = dict(getattr(vision_config, "model_args", None) or {})
        for name, value in args.items():
            types = MODEL_ARGS.get(name)
            if types is None:
                raise ConfigError(f"gemma3n: vision model_args {name!r} is not supported")
            if isinstance(value, bool) or not isinstance(value, types) or value <= 0:
                raise ConfigError(f"gemma3n: vision model_args {name}={value!r} is not positive")
        return cls(**args)

    def channels(self, count: int) -> int:
        """timm's ``round_channels``: ``count`` scaled by the multiplier, to a multiple of 8."""
        return make_divisible(count * self.channel_multiplier)


class RmsNorm2d(nn.Module):
    """RMS norm over the channels of ``[batch, channels, h, w]``, with a scale."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels])
        self.eps = eps

    def forward(self, op, x):
        mean_square = op.ReduceMean(op.Mul(x, x), [1], keepdims=1)
        x = op.Mul(x, op.Pow(op.Add(mean_square, self.eps), -0.5))
        return op.Mul(x, op.Unsqueeze(self.weight, [1, 2]))


class NormAct(RmsNorm2d):
    """timm's ``RmsNormAct2d``: the norm, then tanh-GELU or nothing."""

    def __init__(self, channels: int, eps: float, act: bool) -> None:
        super().__init__(channels, eps)
        self.act = get_activation("gelu_pytorch_tanh") if act else None

    def forward(self, op, x):
        x = super().forward(op, x)
        return self.act(op, x) if self.act is not None else x


class ConvNormAct(nn.Module):
    """A "same"-padded conv (``conv``), its norm and activation (``bn``)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        eps: float,
        stride: int = 1,
        depthwise: bool = False,
        act: bool = True,
        bias: bool = False,
    ) -> None:
        super().__init__()
        groups = cin if depthwise else 1
        self.conv = Conv2d(cin, cout, kernel, stride, "same", groups=groups, bias=bias)
        self.bn = NormAct(cout, eps, act)

    def forward(self, op, x):
        return self.bn(op, self.conv(op, x))


class LayerScale2d(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter([channels])

    def forward(self, op, x):
        return op.Mul(x, op.Unsqueeze(self.gamma, [1, 2]))


class EdgeResidual(nn.Module):
    """A full (not depthwise) expanding conv, then a 1x1 projection; a residual where shapes keep."""

    def __init__(self, c: MobileNetV5Config, cin: int, kernel, stride, expansion, cout) -> None:
        super().__init__()
        mid = make_divisible(cin * expansion)
        self.conv_exp = Conv2d(cin, mid, kernel, stride, "same", bias=False)
        self.bn1 = NormAct(mid, c.eps, act=True)
        self.conv_pwl = Conv2d(mid, cout, 1, bias=False)
        self.bn2 = NormAct(cout, c.eps, act=False)
        self.skip = stride == 1 and cin == cout

    def forward(self, op, x):
        y = self.bn2(op, self.conv_pwl(op, self.bn1(op, self.conv_exp(op, x))))
        return op.Add(y, x) if self.skip else y


class UniversalInvertedResidual(nn.Module):
    """Optional depthwise conv, 1x1 expansion, optional strided depthwise conv, 1x1 projection,
    layer scale; a residual where shapes keep."""

    def __init__(
        self,
        c: MobileNetV5Config,
        cin: int,
        start,
        mid_kernel,
        stride,
        expansion,
        cout,
        layer_scale: bool = True,
        skip: bool = True,
    ) -> None:
        super().__init__()
        mid = make_divisible(cin * expansion)
        start_stride = 1 if mid_kernel else stride
        self.dw_start = (
            ConvNormAct(cin, cin, start, c.eps, start_stride, depthwise=True, act=False)
            if start
            else Identity()
        )
        self.pw_exp = ConvNormAct(cin, mid, 1, c.eps)
        self.dw_mid = (
            ConvNormAct(mid, mid, mid_kernel, c.eps, stride, depthwise=True)
            if mid_kernel
            else Identity()
        )
        self.pw_proj = ConvNormAct(mid, cout, 1, c.eps, act=False)
        self.layer_scale = LayerScale2d(cout) if layer_scale else Identity()
        self.skip = skip and stride == 1 and cin == cout

    def forward(self, op, x):
        y = self.pw_proj(op, self.dw_mid(op, self.pw_exp(op, self.dw_start(op, x))))
        y = self.layer_scale(op, y)
        return op.Add(y, x) if self.skip else y


class KeyValueProjection(nn.Module):
    """MQA's key or value: a strided depthwise conv and norm when ``stride`` > 1, then a 1x1."""

    def __init__(self, c: MobileNetV5Config, dim: int, kernel, stride, out: int) -> None:
        super().__init__()
        strided = stride > 1
        self.down_conv = (
            Conv2d(dim, dim, kernel, stride, "same", groups=dim, bias=False) if strided else None
        )
        self.norm = RmsNorm2d(dim, c.eps) if strided else None
        self.proj = Conv2d(dim, out, 1, bias=False)

    def forward(self, op, x):
        if self.down_conv is not None:
            x = self.norm(op, self.down_conv(op, x))
        return self.proj(op, x)


class Projection(nn.Module):
    """A bare 1x1 conv named ``proj`` (timm's one-module Sequential)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.proj = Conv2d(cin, cout, 1, bias=False)

    def forward(self, op, x):
        return self.proj(op, x)


def _tokens(op, x):
    """``[batch, channels, h, w]`` -> ``[batch, h * w, channels]``."""
    return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])


class MultiQueryAttention2d(nn.Module):
    """Many query heads over one key/value head (keys and values downsampled by ``kv_stride``)."""

    def __init__(self, c: MobileNetV5Config, dim: int, kernel, heads, kv_stride, key_dim) -> None:
        super().__init__()
        self.query = Projection(dim, heads * key_dim)
        self.key = KeyValueProjection(c, dim, kernel, kv_stride, key_dim)
        self.value = KeyValueProjection(c, dim, kernel, kv_stride, key_dim)
        self.output = Projection(heads * key_dim, dim)
        self.heads, self.key_dim = heads, key_dim

    def forward(self, op, x):
        shape = op.Shape(x)
        q = op.Reshape(self.query(op, x), op.Constant(value_ints=[0, self.heads, self.key_dim, -1]))
        q = op.Transpose(q, perm=[0, 1, 3, 2])  # [batch, heads, h * w, key_dim]
        k = op.Unsqueeze(_tokens(op, self.key(op, x)), [1])  # [batch, 1, kv, key_dim]
        v = op.Unsqueeze(_tokens(op, self.value(op, x)), [1])
        scores = op.MatMul(op.Mul(q, self.key_dim**-0.5), op.Transpose(k, perm=[0, 1, 3, 2]))
        out = op.MatMul(op.Softmax(scores, axis=-1), v)  # [batch, heads, h * w, key_dim]
        # back to [batch, heads * key_dim, h, w], channel = head * key_dim + k
        out = op.Transpose(out, perm=[0, 1, 3, 2])
        grid = op.Concat(
            op.Slice(shape, [0], [1]),
            op.Constant(value_ints=[self.heads * self.key_dim]),
            op.Slice(shape, [2], [4]),
            axis=0,
        )
        return self.output(op, op.Reshape(out, grid))


class MobileAttention(nn.Module):
    """Norm, multi-query attention, layer scale, residual."""

    def __init__(self, c: MobileNetV5Config, cin: int, kernel, heads, kv_stride, key_dim, cout):
        super().__init__()
        if cin != cout:
            raise ConfigError("gemma3n: an attention block must keep its channels")
        self.norm = RmsNorm2d(cin, c.eps)
        self.attn = MultiQueryAttention2d(c, cin, kernel, heads, kv_stride, key_dim)
        self.layer_scale = LayerScale2d(cin)

    def forward(self, op, x):
        return op.Add(self.layer_scale(op, self.attn(op, self.norm(op, x))), x)


def _block(c: MobileNetV5Config, cin: int, spec: tuple) -> tuple[nn.Module, int]:
    kind, *args = spec
    cout = c.channels(args[-1])
    args = [*args[:-1], cout]
    if kind == "er":
        return EdgeResidual(c, cin, *args), cout
    if kind == "uir":
        return UniversalInvertedResidual(c, cin, *args), cout
    return MobileAttention(c, cin, *args), cout


class MultiScaleFusionAdapter(nn.Module):
    """The last two stages fused on the finer grid, pooled to ``resolution`` square."""

    def __init__(self, c: MobileNetV5Config, cin: int) -> None:
        super().__init__()
        self.ffn = UniversalInvertedResidual(
            c, cin, 0, 0, 1, 2, c.hidden_size, layer_scale=False, skip=False
        )
        self.norm = RmsNorm2d(c.hidden_size, c.eps)
        self.resolution = c.msfa_output_resolution

    def forward(self, op, fine, coarse):
        size = op.Shape(fine, start=2, end=4)
        sizes = op.Concat(op.Shape(coarse, start=0, end=2), size, axis=0)
        coarse = op.Resize(
            coarse,
            None,
            None,
            sizes,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
        x = self.ffn(op, op.Concat(fine, coarse, axis=1))
        # Average over (h / r) x (w / r) cells: [b, c, r, h / r, r, w / r] -> mean over 3, 5.
        r = self.resolution
        cell = op.Div(size, op.Constant(value_ints=[r, r]))
        shape = op.Concat(
            op.Constant(value_ints=[0, 0, r]),
            op.Slice(cell, [0], [1]),
            op.Constant(value_ints=[r]),
            op.Slice(cell, [1], [2]),
            axis=0,
        )
        x = op.ReduceMean(op.Reshape(x, shape), [3, 5], keepdims=0)
        return self.norm(op, x)


class Stage(nn.Module):
    """A stage's blocks, applied in order and named ``0``, ``1``... under the stage.

    A plain module rather than a ``ModuleList``: a list inside the ``blocks`` list would
    be named twice when the single graph names the tower's weights ahead of its ``If``.
    """

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        for i, block in enumerate(blocks):
            setattr(self, str(i), block)
        self.count = len(blocks)

    def forward(self, op, x):
        for i in range(self.count):
            x = getattr(self, str(i))(op, x)
        return x


class MobileNetV5Encoder(nn.Module):
    """``pixel_values`` -> ``[images, hidden_size, r, r]`` (timm's ``forward_features``)."""

    def __init__(self, config: MobileNetV5Config) -> None:
        super().__init__()
        c = config
        # timm scales the stem only for multipliers of 1 and more
        stem = STEM_CHANNELS if c.channel_multiplier < 1 else c.channels(STEM_CHANNELS)
        self.conv_stem = ConvNormAct(c.num_channels, stem, 3, c.eps, stride=2, bias=True)
        stages, cin, ends = [], stem, []
        for specs in STAGES:
            blocks = []
            for spec in specs:
                block, cin = _block(c, cin, spec)
                blocks.append(block)
            stages.append(Stage(blocks))
            ends.append(cin)
        self.blocks = nn.ModuleList(stages)
        self.msfa = MultiScaleFusionAdapter(c, sum(ends[i] for i in MSFA_STAGES))

    def forward(self, op, pixel_values):
        x = self.conv_stem(op, pixel_values)
        taps = []
        for i, stage in enumerate(self.blocks):
            x = stage(op, x)
            if i in MSFA_STAGES:
                taps.append(x)
        return self.msfa(op, *taps)


class TimmWrapper(nn.Module):
    """transformers' ``TimmWrapperModel``: the timm model under ``timm_model``."""

    def __init__(self, config: MobileNetV5Config) -> None:
        super().__init__()
        self.timm_model = MobileNetV5Encoder(config)

    def forward(self, op, pixel_values):
        return self.timm_model(op, pixel_values)
