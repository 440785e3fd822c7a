"""MobileViTV2: MobileViT's stem and inverted residuals, then blocks of separable linear
self-attention over unfolded patches (one context score per patch, no softmax over pairs),
GroupNorm(1) instead of LayerNorm, and no fusion conv.

Unfolding keeps the whole patches (``nn.functional.unfold``): rows and columns past the last
multiple of ``patch_size`` are dropped, and folding back leaves them zero. The module tree
follows ``MobileViTV2For*`` checkpoints (``mobilevitv2.encoder.layer.2.transformer.layer.0.
attention.qkv_proj.convolution``..., ``classifier``); ``last_hidden_state`` is
``[batch, C, h, w]``, ``pooler_output`` its spatial mean ``[batch, C]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from onnxscript import nn

from mobius_vision.models._conv import Sequential
from mobius_vision.models.bit import GroupNorm
from mobius_vision.models.mobilenet_v2 import make_divisible
from mobius_vision.models.mobilevit import (
    MobileViTBaseConfig,
    MobileViTConvLayer,
    MobileViTEncoder,
    MobileViTForImageClassification,
    MobileViTModel,
    downsampling_layer,
)


@dataclass
class MobileViTV2Config(MobileViTBaseConfig):
    expand_ratio: float = 2.0
    hidden_act: str = "swish"
    n_attn_blocks: tuple[int, ...] = (2, 4, 3)
    base_attn_unit_dims: tuple[int, ...] = (128, 192, 256)
    width_multiplier: float = 1.0
    ffn_multiplier: float = 2.0

    #: Inverted residuals of the two MobileNet layers.
    mobilenet_depths: ClassVar[tuple[int, int]] = (1, 2)

    @property
    def widths(self) -> list[int]:
        """The output width of the stem and of the five encoder layers."""
        m = self.width_multiplier
        stem = make_divisible(min(max(32 * m, 16), 64), 8, 16)
        return [stem, make_divisible(64 * m, 16)] + [
            make_divisible(c * m, 8) for c in (128, 256, 384, 512)
        ]

    def attention_blocks(self) -> list[tuple[int, int]]:
        """Each MobileViTV2 block's attention width and depth."""
        dims = [make_divisible(d * self.width_multiplier, 8) for d in self.base_attn_unit_dims]
        return list(zip(dims, self.n_attn_blocks, strict=True))


class MobileViTV2LinearSelfAttention(nn.Module):
    """``out_proj(relu(v) * sum_n(k * softmax_n(q)))`` over ``[batch, C, p*p, patches]``."""

    def __init__(self, config: MobileViTV2Config, dim: int) -> None:
        super().__init__()
        proj = dict(bias=True, norm=False, act=False)
        self.qkv_proj = MobileViTConvLayer(config, dim, 1 + 2 * dim, 1, **proj)
        self.out_proj = MobileViTConvLayer(config, dim, dim, 1, **proj)
        self.dim = dim

    def forward(self, op, x):
        qkv = self.qkv_proj(op, x)  # [batch, 1 + 2C, p*p, patches]
        splits = op.Constant(value_ints=[1, self.dim, self.dim])
        q, k, v = op.Split(qkv, splits, axis=1, _outputs=3)
        scores = op.Softmax(q, axis=-1)  # [batch, 1, p*p, patches]
        context = op.ReduceSum(op.Mul(k, scores), op.Constant(value_ints=[-1]), keepdims=1)
        return self.out_proj(op, op.Mul(op.Relu(v), context))


class MobileViTV2FFN(nn.Module):
    def __init__(self, config: MobileViTV2Config, dim: int, latent: int) -> None:
        super().__init__()
        self.conv1 = MobileViTConvLayer(config, dim, latent, 1, bias=True, norm=False)
        self.conv2 = MobileViTConvLayer(config, latent, dim, 1, bias=True, norm=False, act=False)

    def forward(self, op, x):
        return self.conv2(op, self.conv1(op, x))


class MobileViTV2TransformerLayer(nn.Module):
    def __init__(self, config: MobileViTV2Config, dim: int, latent: int) -> None:
        super().__init__()
        eps = config.layer_norm_eps
        self.layernorm_before = GroupNorm(1, dim, eps)
        self.attention = MobileViTV2LinearSelfAttention(config, dim)
        self.layernorm_after = GroupNorm(1, dim, eps)
        self.ffn = MobileViTV2FFN(config, dim, latent)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.layernorm_before(op, x)))
        return op.Add(x, self.ffn(op, self.layernorm_after(op, x)))


class MobileViTV2Transformer(nn.Module):
    def __init__(self, config: MobileViTV2Config, dim: int, depth: int) -> None:
        super().__init__()
        latent = int(config.ffn_multiplier * dim // 16 * 16)  # a multiple of 16, as HF rounds it
        self.layer = Sequential(
            [MobileViTV2TransformerLayer(config, dim, latent) for _ in range(depth)]
        )

    def forward(self, op, x):
        return self.layer(op, x)


class MobileViTV2Layer(nn.Module):
    """Downsample, depthwise kxk and 1x1, linear-attention layers over patches, GroupNorm, fold,
    1x1 projection with BatchNorm."""

    def __init__(
        self,
        config: MobileViTV2Config,
        in_ch: int,
        out_ch: int,
        dim: int,
        depth: int,
        dilation: int,
        size: tuple[int, int],
    ) -> None:
        super().__init__()
        k = config.conv_kernel_size
        self.downsampling_layer = downsampling_layer(config, in_ch, out_ch, dilation)
        self.conv_kxk = MobileViTConvLayer(config, out_ch, out_ch, k, groups=out_ch)
        self.conv_1x1 = MobileViTConvLayer(config, out_ch, dim, 1, norm=False, act=False)
        self.transformer = MobileViTV2Transformer(config, dim, depth)
        self.layernorm = GroupNorm(1, dim, config.layer_norm_eps)
        self.conv_projection = MobileViTConvLayer(config, dim, out_ch, 1, act=False)
        p = self.patch = config.patch_size
        self.size = size
        self.kept = tuple(s // p * p for s in size)
        self.dim = dim

    def unfold(self, op, x):
        """``[batch, C, H, W]`` -> ``[batch, C, p*p, patches]``, as ``nn.functional.unfold``."""
        p, (h, w), c = self.patch, self.kept, self.dim
        if self.kept != self.size:
            start, end = op.Constant(value_ints=[0, 0]), op.Constant(value_ints=[h, w])
            x = op.Slice(x, start, end, op.Constant(value_ints=[2, 3]))  # whole patches only
        x = op.Reshape(x, op.Constant(value_ints=[-1, c, h // p, p, w // p, p]))
        x = op.Transpose(x, perm=[0, 1, 3, 5, 2, 4])  # [batch, C, p, p, h/p, w/p]
        return op.Reshape(x, op.Constant(value_ints=[-1, c, p * p, (h // p) * (w // p)]))

    def fold(self, op, x):
        """The inverse of :meth:`unfold`, zeros where the patches did not reach."""
        p, (h, w), c = self.patch, self.kept, self.dim
        x = op.Reshape(x, op.Constant(value_ints=[-1, c, p, p, h // p, w // p]))
        x = op.Transpose(x, perm=[0, 1, 4, 2, 5, 3])  # [batch, C, h/p, p, w/p, p]
        x = op.Reshape(x, op.Constant(value_ints=[-1, c, h, w]))
        if self.kept != self.size:
            bottom, right = self.size[0] - h, self.size[1] - w
            x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, 0, bottom, right]))
        return x

    def forward(self, op, x):
        x = self.downsampling_layer(op, x)
        x = self.conv_1x1(op, self.conv_kxk(op, x))  # [batch, dim, h, w]
        x = self.layernorm(op, self.transformer(op, self.unfold(op, x)))
        return self.conv_projection(op, self.fold(op, x))


class MobileViTV2Encoder(MobileViTEncoder):
    block_class = MobileViTV2Layer


class MobileViTV2Model(MobileViTModel):
    """MobileViT's backbone without ``conv_1x1_exp``."""

    encoder_class = MobileViTV2Encoder

    def expansion(self, config) -> None:
        return None


class MobileViTV2ForImageClassification(MobileViTForImageClassification):
    config_class = MobileViTV2Config
    model_class = MobileViTV2Model
    base_model_prefix = "mobilevitv2"


MODEL_TYPES = {"mobilevitv2": MobileViTV2ForImageClassification}
