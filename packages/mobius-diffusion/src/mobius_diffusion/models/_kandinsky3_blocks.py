"""The blocks of Kandinsky 3's UNet, over ``[batch, channels, h, w]`` and its time embedding.

A conditional GroupNorm (weightless, then ``1 + scale`` and ``shift`` from the time
embedding), the norm-SiLU-conv block and the four-block resnet built of it, the attention
block over the pixels (self- or cross-attention, then a 1x1-conv MLP), the attention
pooling of the text into the time embedding, and the text projection. Submodules carry
diffusers' names; an ``nn.Sequential``'s parameterless positions are empty modules.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Conv2d, GroupNorm, LayerNorm, Linear
from mobius_diffusion.models._resnet import activation
from mobius_diffusion.models._stable_cascade_blocks import ConvTranspose2d
from mobius_diffusion.models.pixart import MaskedCrossAttention, caption_bias

EPS = 1e-5  # torch's GroupNorm and LayerNorm default, which diffusers keeps
EXPANSION, COMPRESSION = 4, 2  # the attention MLP's widening, the resnets' narrowing

silu = activation("silu")


class ConditionalGroupNorm(nn.Module):
    """A weightless GroupNorm, times ``1 + scale`` plus ``shift``: ``context_mlp.1`` of SiLU(time)."""

    def __init__(self, groups: int, channels: int, time_dim: int) -> None:
        super().__init__()
        self.norm = GroupNorm(groups, channels, EPS, affine=False)
        self.context_mlp = nn.ModuleList([nn.Module(), Linear(time_dim, 2 * channels, bias=True)])

    def forward(self, op, x, temb):
        context = op.Unsqueeze(self.context_mlp[1](op, silu(op, temb)), [2, 3])  # [b, 2c, 1, 1]
        scale, shift = op.Split(context, num_outputs=2, axis=1, _outputs=2)
        return op.Add(op.Mul(self.norm(op, x), op.Add(scale, 1.0)), shift)


class Kandinsky3Block(nn.Module):
    """Conditional norm, SiLU, optional 2x ``up_sample``, ``projection``, optional 2x ``down_sample``."""

    def __init__(self, in_ch, out_ch, time_dim, kernel, groups, resample=None) -> None:
        super().__init__()
        self.group_norm = ConditionalGroupNorm(groups, in_ch, time_dim)
        self.up_sample = ConvTranspose2d(in_ch, in_ch, 2, stride=2) if resample == "up" else None
        self.projection = Conv2d(in_ch, out_ch, kernel, padding=int(kernel > 1))
        down = resample == "down"
        self.down_sample = Conv2d(out_ch, out_ch, 2, stride=2) if down else None

    def forward(self, op, x, temb):
        x = silu(op, self.group_norm(op, x, temb))
        x = x if self.up_sample is None else self.up_sample(op, x)
        x = self.projection(op, x)
        return x if self.down_sample is None else self.down_sample(op, x)


class Kandinsky3ResNetBlock(nn.Module):
    """Four blocks (kernels 1, 3, 3, 1) through ``max(in, out) / 2`` channels, plus the shortcut;
    ``resample`` ``"up"`` (in the second block) or ``"down"`` (in the third) resizes both paths."""

    def __init__(self, in_ch, out_ch, time_dim, groups, resample=None) -> None:
        super().__init__()
        hidden = max(in_ch, out_ch) // COMPRESSION
        dims, where = (in_ch, hidden, hidden, hidden, out_ch), {"up": 1, "down": 2}.get(resample)
        self.resnet_blocks = nn.ModuleList(
            [
                Kandinsky3Block(
                    dims[i], dims[i + 1], time_dim, k, groups, resample if i == where else None
                )
                for i, k in enumerate((1, 3, 3, 1))
            ]
        )
        up, down = resample == "up", resample == "down"
        self.shortcut_up_sample = ConvTranspose2d(in_ch, in_ch, 2, stride=2) if up else None
        self.shortcut_projection = Conv2d(in_ch, out_ch, 1) if in_ch != out_ch else None
        self.shortcut_down_sample = Conv2d(out_ch, out_ch, 2, stride=2) if down else None

    def forward(self, op, x, temb):
        out = x
        for block in self.resnet_blocks:
            out = block(op, out, temb)
        for shortcut in (
            self.shortcut_up_sample,
            self.shortcut_projection,
            self.shortcut_down_sample,
        ):
            x = x if shortcut is None else shortcut(op, x)
        return op.Add(x, out)


class Kandinsky3AttentionBlock(nn.Module):
    """Attention of the pixels over themselves or the text (its padding masked), then a 1x1-conv
    MLP (``feed_forward.0``, SiLU, ``feed_forward.2``), each after a conditional norm, residual."""

    def __init__(self, channels, time_dim, context_dim, groups, head_dim) -> None:
        super().__init__()
        self.in_norm = ConditionalGroupNorm(groups, channels, time_dim)
        heads = channels // head_dim
        self.attention = MaskedCrossAttention(
            channels, heads, head_dim, context_dim, out_bias=False, out_dim=channels
        )
        self.out_norm = ConditionalGroupNorm(groups, channels, time_dim)
        hidden = EXPANSION * channels
        self.feed_forward = nn.ModuleList(
            [
                Conv2d(channels, hidden, 1, bias=False),
                nn.Module(),
                Conv2d(hidden, channels, 1, bias=False),
            ]
        )

    def forward(self, op, x, temb, context=None, mask=None):
        normed = self.in_norm(op, x, temb)
        tokens = op.Transpose(
            op.Reshape(normed, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1]
        )
        bias = None if mask is None else caption_bias(op, mask, tokens)
        out = self.attention(op, tokens, tokens if context is None else context, bias)
        x = op.Add(x, op.Reshape(op.Transpose(out, perm=[0, 2, 1]), op.Shape(x)))  # [b, c, h, w]
        hidden = silu(op, self.feed_forward[0](op, self.out_norm(op, x, temb)))
        return op.Add(x, self.feed_forward[2](op, hidden))


class Kandinsky3AttentionPooling(nn.Module):
    """The time embedding plus the attention of the tokens' mean over the (masked) tokens."""

    def __init__(self, num_channels, context_dim, head_dim) -> None:
        super().__init__()
        heads = num_channels // head_dim
        self.attention = MaskedCrossAttention(
            context_dim, heads, head_dim, context_dim, out_bias=False, out_dim=num_channels
        )

    def forward(self, op, temb, context, mask):
        query = op.ReduceMean(context, [1], keepdims=1)  # [b, 1, context_dim]
        pooled = self.attention(op, query, context, caption_bias(op, mask, query))
        return op.Add(temb, op.Squeeze(pooled, [1]))


class Kandinsky3EncoderProj(nn.Module):
    """The T5 states to the cross-attention width: a bias-free linear, then a LayerNorm."""

    def __init__(self, encoder_hid_dim: int, cross_attention_dim: int) -> None:
        super().__init__()
        self.projection_linear = Linear(encoder_hid_dim, cross_attention_dim)
        self.projection_norm = LayerNorm(cross_attention_dim, EPS)

    def forward(self, op, x):
        return self.projection_norm(op, self.projection_linear(op, x))
