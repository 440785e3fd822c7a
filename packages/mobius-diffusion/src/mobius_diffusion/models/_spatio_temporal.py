"""The video blocks of Stable Video Diffusion's UNet and temporal VAE decoder (diffusers' names).

Frames travel as images, ``[batch * frames, channels, h, w]`` (the batch's videos one
after the other), with ``frames`` (int64 ``[1]``) beside them. A spatio-temporal
resnet is a 2-D resnet per frame, then a temporal resnet (3x1x1 convs over the
frames of each video), blended by a learned ``time_mixer``: ``alpha * spatial +
(1 - alpha) * temporal`` with ``alpha = sigmoid(mix_factor)`` (the UNet's mixers see
diffusers' all-zero ``image_only_indicator``, which makes ``learned_with_images`` this
too; the VAE's swap the two sides). The spatio-temporal transformer runs a
``BasicTransformerBlock`` over each frame's pixels, then a temporal block over each
pixel's frames (plus a learned embedding of the frame index), blended the same way.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Conv3d, GroupNorm, LayerNorm, Linear
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._resnet import ResnetBlock2D, activation
from mobius_diffusion.models._unet_blocks import BasicTransformerBlock

#: diffusers fixes the GroupNorm groups of every SVD block.
GROUPS = 32


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def to_video(op, x, frames):
    """``[b * f, c, h, w]`` -> ``[b, c, f, h, w]``."""
    video = op.Reshape(x, op.Concat(_ints(op, [-1]), frames, op.Shape(x, start=1), axis=0))
    return op.Transpose(video, perm=[0, 2, 1, 3, 4])


def to_frames(op, video):
    """``[b, c, f, h, w]`` -> ``[b * f, c, h, w]``."""
    x = op.Transpose(video, perm=[0, 2, 1, 3, 4])  # [b, f, c, h, w]
    return op.Reshape(x, op.Concat(_ints(op, [-1]), op.Shape(x, start=2), axis=0))


class AlphaBlender(nn.Module):
    """``alpha * spatial + (1 - alpha) * temporal``, ``alpha = sigmoid(mix_factor)`` (or 1 - it)."""

    def __init__(self, switch_spatial_to_temporal_mix: bool = False) -> None:
        super().__init__()
        self.switch = switch_spatial_to_temporal_mix
        self.mix_factor = nn.Parameter([1])

    def forward(self, op, spatial, temporal):
        alpha = op.Sigmoid(op.CastLike(self.mix_factor, spatial))
        one = op.CastLike(1.0, spatial)
        if self.switch:
            alpha = op.Sub(one, alpha)
        return op.Add(op.Mul(alpha, spatial), op.Mul(op.Sub(one, alpha), temporal))


class TemporalResnetBlock(nn.Module):
    """A resnet over ``[b, c, f, h, w]`` whose convs span 3 frames and one pixel."""

    def __init__(self, channels: int, temb_channels: int | None, eps: float) -> None:
        super().__init__()
        self.act = activation("silu")
        self.norm1 = GroupNorm(GROUPS, channels, eps, spatial_dims=3)
        self.conv1 = Conv3d(channels, channels, (3, 1, 1), padding=(1, 0, 0))
        self.time_emb_proj = Linear(temb_channels, channels, bias=True) if temb_channels else None
        self.norm2 = GroupNorm(GROUPS, channels, eps, spatial_dims=3)
        self.conv2 = Conv3d(channels, channels, (3, 1, 1), padding=(1, 0, 0))

    def forward(self, op, x, temb=None):
        """``temb`` is ``[b, f, temb_channels]``: one embedding per frame."""
        h = self.conv1(op, self.act(op, self.norm1(op, x)))
        if self.time_emb_proj is not None:
            temb = self.time_emb_proj(op, self.act(op, temb))  # [b, f, c]
            h = op.Add(h, op.Unsqueeze(op.Transpose(temb, perm=[0, 2, 1]), [3, 4]))
        h = self.conv2(op, self.act(op, self.norm2(op, h)))
        return op.Add(x, h)


class SpatioTemporalResBlock(nn.Module):
    """``spatial_res_block`` per frame, ``temporal_res_block`` across frames, ``time_mixer``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        temb_channels: int | None,
        eps: float,
        temporal_eps: float | None = None,
        switch_spatial_to_temporal_mix: bool = False,
    ) -> None:
        super().__init__()
        self.spatial_res_block = ResnetBlock2D(
            in_channels, out_channels, temb_channels, GROUPS, eps, "silu"
        )
        self.temporal_res_block = TemporalResnetBlock(
            out_channels, temb_channels, eps if temporal_eps is None else temporal_eps
        )
        self.time_mixer = AlphaBlender(switch_spatial_to_temporal_mix)

    def forward(self, op, x, temb, frames):
        spatial = to_video(op, self.spatial_res_block(op, x, temb), frames)  # [b, c, f, h, w]
        if temb is not None:  # [b * f, t] -> [b, f, t]
            temb = op.Reshape(
                temb, op.Concat(_ints(op, [-1]), frames, op.Shape(temb, start=1), axis=0)
            )
        temporal = self.temporal_res_block(op, spatial, temb)
        return to_frames(op, self.time_mixer(op, spatial, temporal))


class TemporalBasicTransformerBlock(nn.Module):
    """Attention across each pixel's frames: ``ff_in``, self-attention, cross-attention, ``ff``."""

    def __init__(self, dim: int, heads: int, head_dim: int, cross_attention_dim: int) -> None:
        super().__init__()
        self.norm_in = LayerNorm(dim, 1e-5)
        self.ff_in = FeedForward(dim, dim_out=dim, activation_fn="geglu")
        self.norm1 = LayerNorm(dim, 1e-5)
        self.attn1 = Attention(dim, heads, head_dim)
        self.norm2 = LayerNorm(dim, 1e-5)
        self.attn2 = Attention(dim, heads, head_dim, cross_attention_dim=cross_attention_dim)
        self.norm3 = LayerNorm(dim, 1e-5)
        self.ff = FeedForward(dim, activation_fn="geglu")

    def forward(self, op, x, frames, context):
        """``x`` [b * f, s, c] (s pixels a frame); ``context`` [b * s, sequence, d]."""
        pixels, channels = op.Shape(x, start=1, end=2), op.Shape(x, start=2)
        x = op.Reshape(x, op.Concat(_ints(op, [-1]), frames, pixels, channels, axis=0))
        x = op.Transpose(x, perm=[0, 2, 1, 3])  # [b, s, f, c]
        x = op.Reshape(x, op.Concat(_ints(op, [-1]), frames, channels, axis=0))  # [b * s, f, c]
        x = op.Add(self.ff_in(op, self.norm_in(op, x)), x)
        x = op.Add(self.attn1(op, self.norm1(op, x)), x)
        x = op.Add(self.attn2(op, self.norm2(op, x), context), x)
        x = op.Add(self.ff(op, self.norm3(op, x)), x)
        x = op.Reshape(x, op.Concat(_ints(op, [-1]), pixels, frames, channels, axis=0))
        x = op.Transpose(x, perm=[0, 2, 1, 3])  # [b, f, s, c]
        return op.Reshape(x, op.Concat(_ints(op, [-1]), pixels, channels, axis=0))


class TransformerSpatioTemporalModel(nn.Module):
    """Spatial and temporal transformer blocks in pairs over ``[b * f, c, h, w]``, residual around."""

    def __init__(self, heads: int, channels: int, depth: int, cross_attention_dim: int) -> None:
        super().__init__()
        head_dim = channels // heads  # diffusers' inner dim is heads * head_dim = channels
        self.norm = GroupNorm(GROUPS, channels, 1e-6)
        self.proj_in = Linear(channels, channels, bias=True)
        self.transformer_blocks = nn.ModuleList(
            [
                BasicTransformerBlock(channels, heads, head_dim, cross_attention_dim)
                for _ in range(depth)
            ]
        )
        self.temporal_transformer_blocks = nn.ModuleList(
            [
                TemporalBasicTransformerBlock(channels, heads, head_dim, cross_attention_dim)
                for _ in range(depth)
            ]
        )
        self.time_pos_embed = TimestepEmbedding(channels, channels * 4, out_dim=channels)
        self.time_proj = Timesteps(channels, True, 0)
        self.time_mixer = AlphaBlender()
        self.proj_out = Linear(channels, channels, bias=True)

    def frame_context(self, op, context, frames, pixels):
        """The temporal blocks' context: each video's first frame's, once per pixel
        ``[b * pixels, sequence, d]``."""
        rest = op.Shape(context, start=1)  # [sequence, d]
        per_video = op.Reshape(context, op.Concat(_ints(op, [-1]), frames, rest, axis=0))
        first = op.Gather(per_video, op.Constant(value_int=0), axis=1)  # [b, sequence, d]
        videos = op.Shape(first, start=0, end=1)
        spread = op.Expand(op.Unsqueeze(first, [1]), op.Concat(videos, pixels, rest, axis=0))
        return op.Reshape(spread, op.Concat(_ints(op, [-1]), rest, axis=0))

    def frame_embedding(self, op, tokens, frames):
        """``time_pos_embed`` of each frame's index, ``[b * f, 1, c]``."""
        index = op.Range(
            op.Constant(value_int=0), op.Squeeze(frames, [0]), op.Constant(value_int=1)
        )
        emb = self.time_pos_embed(op, self.time_proj(op, index, tokens))  # [f, c]
        videos = op.Div(op.Shape(tokens, start=0, end=1), frames)
        return op.Unsqueeze(op.Tile(emb, op.Concat(videos, _ints(op, [1]), axis=0)), [1])

    def forward(self, op, x, context, frames):
        """``x`` [b * f, c, h, w]; ``context`` [b * f, sequence, d] (each video's repeated)."""
        h = self.norm(op, x)
        tokens = op.Transpose(op.Reshape(h, _ints(op, [0, 0, -1])), perm=[0, 2, 1])
        tokens = self.proj_in(op, tokens)  # [b * f, h * w, c]
        pixels = op.Shape(tokens, start=1, end=2)
        time_context = self.frame_context(op, context, frames, pixels)
        emb = self.frame_embedding(op, tokens, frames)
        for block, temporal in zip(
            self.transformer_blocks, self.temporal_transformer_blocks, strict=True
        ):
            tokens = block(op, tokens, context)
            mixed = temporal(op, op.Add(tokens, emb), frames, time_context)
            tokens = self.time_mixer(op, tokens, mixed)
        tokens = self.proj_out(op, tokens)
        return op.Add(op.Reshape(op.Transpose(tokens, perm=[0, 2, 1]), op.Shape(x)), x)
