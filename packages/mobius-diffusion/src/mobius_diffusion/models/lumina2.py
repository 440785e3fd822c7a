"""Lumina Image 2.0's transformer: caption and noise refiners, then joint blocks over both.

The caption (Gemma-2 states) is RMS-normed and projected; two unmodulated
"context refiner" blocks run over it (its padding masked), two timestep-modulated
"noise refiner" blocks over the image patches, then the joint blocks over
[caption, image]. Every block is a sandwich: RMS norms before and after the
attention and the SwiGLU feed-forward, residuals gated by ``tanh`` of the
modulation; attention is grouped-query (``num_kv_heads``) with per-head RMS norms of
queries and keys and a 3-axis RoPE (adjacent channel pairs): caption token ``j``
sits at ``(j, 0, 0)``, image patch ``(r, c)`` at ``(caption length, r, c)``, one
caption length per batch row (the sum of its mask).

diffusers packs each row's real caption tokens and its image tokens into one
sequence and pads at the end; here the joint sequence is the full caption then the
image, the caption's padding masked as keys and dropped from the output: the same
keys for every query, so the same result. As in diffusers, the real caption tokens
of a row are its first ``sum(mask)`` ones, and padded caption tokens get a zero
rotation (their queries and keys are zero) in the caption refiner.

Module tree and names follow diffusers' ``Lumina2Transformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``timestep`` [batch] (as the pipeline passes it:
``1 - t / 1000``, in [0, 1]), ``encoder_hidden_states`` [batch, sequence,
cap_feat_dim], ``encoder_attention_mask`` int64 [batch, sequence] ->
``out_hidden_states`` [batch, out_channels, latent_height, latent_width]. The RoPE
angles are computed in the graph (float32, no table: diffusers' ``axes_lens`` only
bounds the positions it can look up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_float, config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    AxesRotary,
    WeightlessLayerNorm,
    _ints,
    per_token,
    unpatchify,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models.pixart import caption_bias
from mobius_diffusion.tasks import GraphSpec

#: diffusers' eps of the per-head query and key RMS norms (fixed, not in the config).
QK_NORM_EPS = 1e-5


@dataclass
class Lumina2Config:
    sample_size: int = 128
    patch_size: int = 2
    in_channels: int = 16
    out_channels: int = 16
    hidden_size: int = 2304
    num_layers: int = 26
    num_refiner_layers: int = 2
    num_attention_heads: int = 24
    num_kv_heads: int = 8
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    axes_dim_rope: tuple[int, ...] = (32, 32, 32)
    cap_feat_dim: int = 1024

    @classmethod
    def from_hf(cls, config: Any) -> Lumina2Config:
        hidden = config_int(config, "hidden_size", 2304)
        heads = config_int(config, "num_attention_heads", 24)
        kv_heads = config_int(config, "num_kv_heads", 8)
        axes = config_ints(config, "axes_dim_rope", (32, 32, 32), count=3)
        name = config.model_type
        if hidden % heads or heads % kv_heads:
            raise ConfigError(
                f"{name} num_attention_heads {heads} must divide hidden_size {hidden} "
                f"and be a multiple of num_kv_heads {kv_heads}"
            )
        if sum(axes) != hidden // heads or any(d % 2 for d in axes):
            raise ConfigError(
                f"{name} axes_dim_rope {list(axes)} must be even and sum to the head dim "
                f"{hidden // heads}"
            )
        multiplier = getattr(config, "ffn_dim_multiplier", None)
        in_channels = config_int(config, "in_channels", 16)
        out_channels = in_channels  # diffusers' ``out_channels or in_channels``
        if getattr(config, "out_channels", None):
            out_channels = config_int(config, "out_channels")
        return cls(
            sample_size=config_int(config, "sample_size", 128),
            patch_size=config_int(config, "patch_size", 2),
            in_channels=in_channels,
            out_channels=out_channels,
            hidden_size=hidden,
            num_layers=config_int(config, "num_layers", 26),
            num_refiner_layers=config_int(config, "num_refiner_layers", 2, low=0),
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            multiple_of=config_int(config, "multiple_of", 256),
            ffn_dim_multiplier=None
            if multiplier is None
            else config_float(config, "ffn_dim_multiplier"),
            norm_eps=config_float(config, "norm_eps", 1e-5),
            axes_dim_rope=axes,
            cap_feat_dim=config_int(config, "cap_feat_dim", 1024),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def time_embed_dim(self) -> int:
        """The width of the timestep embedding: the hidden size, at most 1024."""
        return min(self.hidden_size, 1024)

    @property
    def ffn_inner_dim(self) -> int:
        """diffusers' ``LuminaFeedForward``: ``4 * hidden``, times the multiplier, rounded up."""
        inner = 4 * self.hidden_size
        if self.ffn_dim_multiplier is not None:
            inner = int(self.ffn_dim_multiplier * inner)
        return self.multiple_of * ((inner + self.multiple_of - 1) // self.multiple_of)


class Lumina2Attention(nn.Module):
    """Grouped-query attention: per-head RMS norms of q and k, then RoPE; no biases.

    ``rotary`` is ``(cos, sin)`` ``[batch, tokens, head_dim/2]``; ``bias`` an additive
    key mask ``[batch, 1, queries, keys]`` or ``None``.
    """

    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.to_q = Linear(dim, heads * self.head_dim, bias=False)
        self.to_k = Linear(dim, kv_heads * self.head_dim, bias=False)
        self.to_v = Linear(dim, kv_heads * self.head_dim, bias=False)
        self.norm_q = RMSNorm(self.head_dim, QK_NORM_EPS)
        self.norm_k = RMSNorm(self.head_dim, QK_NORM_EPS)
        self.to_out = nn.ModuleList([Linear(heads * self.head_dim, dim, bias=False)])

    def normed_rotated(self, op, x, norm, heads: int, rotary):
        """``norm`` over each head of ``x [batch, tokens, heads*head_dim]``, then the rotation."""
        split = op.Reshape(x, op.Constant(value_ints=[0, 0, heads, self.head_dim]))
        x = op.Reshape(norm(op, split), op.Constant(value_ints=[0, 0, -1]))
        cos, sin = rotary
        return op.RotaryEmbedding(x, cos, sin, interleaved=1, num_heads=heads)

    def forward(self, op, x, rotary, bias):
        q = self.normed_rotated(op, self.to_q(op, x), self.norm_q, self.heads, rotary)
        k = self.normed_rotated(op, self.to_k(op, x), self.norm_k, self.kv_heads, rotary)
        out = op.Attention(
            q,
            k,
            self.to_v(op, x),
            bias,
            q_num_heads=self.heads,
            kv_num_heads=self.kv_heads,
            scale=self.head_dim**-0.5,
        )
        return self.to_out[0](op, out)


class LuminaFeedForward(nn.Module):
    """SwiGLU with no biases: ``linear_2(silu(linear_1(x)) * linear_3(x))``."""

    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.linear_1 = Linear(dim, inner, bias=False)
        self.linear_2 = Linear(inner, dim, bias=False)
        self.linear_3 = Linear(dim, inner, bias=False)

    def forward(self, op, x):
        gate = self.linear_1(op, x)
        return self.linear_2(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), self.linear_3(op, x)))


class LuminaRMSNormZero(nn.Module):
    """``linear(silu(temb))`` split in (scale_msa, gate_msa, scale_mlp, gate_mlp); ``norm(x)``
    scaled by ``1 + scale_msa``."""

    def __init__(self, dim: int, cond_dim: int, eps: float) -> None:
        super().__init__()
        self.linear = Linear(cond_dim, 4 * dim, bias=True)
        self.norm = RMSNorm(dim, eps)

    def forward(self, op, x, temb):
        emb = self.linear(op, op.Mul(temb, op.Sigmoid(temb)))
        scale_msa, gate_msa, scale_mlp, gate_mlp = op.Split(emb, axis=1, num_outputs=4, _outputs=4)
        return op.Mul(self.norm(op, x), op.Add(per_token(op, scale_msa), 1.0)), (
            gate_msa,
            scale_mlp,
            gate_mlp,
        )


class Lumina2RefinerBlock(nn.Module):
    """The unmodulated block (the caption refiner): sandwich RMS norms, plain residuals."""

    def __init__(self, config: Lumina2Config) -> None:
        super().__init__()
        c, dim = config, config.hidden_size
        self.attn = Lumina2Attention(dim, c.num_attention_heads, c.num_kv_heads)
        self.feed_forward = LuminaFeedForward(dim, c.ffn_inner_dim)
        self.norm1 = self.make_norm1(config)
        self.ffn_norm1 = RMSNorm(dim, c.norm_eps)
        self.norm2 = RMSNorm(dim, c.norm_eps)
        self.ffn_norm2 = RMSNorm(dim, c.norm_eps)

    def make_norm1(self, config: Lumina2Config) -> nn.Module:
        return RMSNorm(config.hidden_size, config.norm_eps)

    def forward(self, op, x, rotary, bias, temb=None):
        x = op.Add(x, self.norm2(op, self.attn(op, self.norm1(op, x), rotary, bias)))
        ff = self.feed_forward(op, self.ffn_norm1(op, x))
        return op.Add(x, self.ffn_norm2(op, ff))


class Lumina2TransformerBlock(Lumina2RefinerBlock):
    """The modulated block (noise refiner and joint layers): ``tanh``-gated residuals and the
    feed-forward's input scaled by the timestep."""

    def make_norm1(self, config: Lumina2Config) -> nn.Module:
        return LuminaRMSNormZero(config.hidden_size, config.time_embed_dim, config.norm_eps)

    def forward(self, op, x, rotary, bias, temb=None):
        normed, (gate_msa, scale_mlp, gate_mlp) = self.norm1(op, x, temb)
        attn = self.norm2(op, self.attn(op, normed, rotary, bias))
        x = op.Add(x, op.Mul(per_token(op, op.Tanh(gate_msa)), attn))
        scaled = op.Mul(self.ffn_norm1(op, x), op.Add(per_token(op, scale_mlp), 1.0))
        ff = self.ffn_norm2(op, self.feed_forward(op, scaled))
        return op.Add(x, op.Mul(per_token(op, op.Tanh(gate_mlp)), ff))


class Lumina2CombinedTimestepCaptionEmbedding(nn.Module):
    """``timestep_embedder`` (sinusoid of 256, flipped) and ``caption_embedder`` (RMS norm, linear)."""

    def __init__(self, config: Lumina2Config) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0.0)
        self.timestep_embedder = TimestepEmbedding(256, config.time_embed_dim)
        self.caption_embedder = nn.ModuleList(
            [
                RMSNorm(config.cap_feat_dim, config.norm_eps),
                Linear(config.cap_feat_dim, config.hidden_size, bias=True),
            ]
        )

    def forward(self, op, timestep, caption, like):
        temb = self.timestep_embedder(op, self.time_proj(op, timestep, like))
        return temb, self.caption_embedder[1](op, self.caption_embedder[0](op, caption))


class LuminaLayerNormContinuous(nn.Module):
    """``linear_2(norm(x) * (1 + linear_1(silu(temb))))``: weightless LayerNorm, eps 1e-6."""

    def __init__(self, dim: int, cond_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear_1 = Linear(cond_dim, dim, bias=True)
        self.norm = WeightlessLayerNorm(dim, 1e-6)
        self.linear_2 = Linear(dim, out_dim, bias=True)

    def forward(self, op, x, temb):
        scale = self.linear_1(op, op.Mul(temb, op.Sigmoid(temb)))
        return self.linear_2(op, op.Mul(self.norm(op, x), op.Add(per_token(op, scale), 1.0)))


def patchify(op, x, h, w, patch_size: int, channels: int):
    """``[b, c, h*p, w*p]`` -> ``[b, h*w, p*p*c]`` (each patch's rows, columns, then channels)."""
    p = _ints(op, [patch_size])
    x = op.Reshape(x, op.Concat(_ints(op, [0, channels]), h, p, w, p, axis=0))
    x = op.Transpose(x, perm=[0, 2, 4, 3, 5, 1])  # [b, h, w, p, p, c]
    return op.Reshape(x, _ints(op, [0, -1, patch_size * patch_size * channels]))


def image_positions(op, h, w):
    """float32 ``[h*w, 3]``: ``(0, row, column)`` of each patch, row-major."""
    shape = op.Concat(h, w, axis=0)
    zero, one = op.Constant(value_int=0), op.Constant(value_int=1)
    rows = op.Expand(op.Unsqueeze(op.Range(zero, op.Squeeze(h), one), [1]), shape)
    cols = op.Expand(op.Unsqueeze(op.Range(zero, op.Squeeze(w), one), [0]), shape)
    grid = op.Concat(op.Reshape(rows, [-1, 1]), op.Reshape(cols, [-1, 1]), axis=1)
    return op.Pad(op.Cast(grid, to=ir.DataType.FLOAT), _ints(op, [0, 1, 0, 0]))  # axis 0: zero


class Lumina2Transformer2DModel(Model):
    """diffusers' ``Lumina2Transformer2DModel`` (Lumina Image 2.0)."""

    config_class = Lumina2Config
    task = "denoising"

    def __init__(self, config: Lumina2Config) -> None:
        super().__init__()
        self.config = config
        c, dim = config, config.hidden_size
        self.rope_embedder = AxesRotary(c.axes_dim_rope)
        self.x_embedder = Linear(c.patch_size**2 * c.in_channels, dim, bias=True)
        self.time_caption_embed = Lumina2CombinedTimestepCaptionEmbedding(c)
        self.noise_refiner = nn.ModuleList(
            [Lumina2TransformerBlock(c) for _ in range(c.num_refiner_layers)]
        )
        self.context_refiner = nn.ModuleList(
            [Lumina2RefinerBlock(c) for _ in range(c.num_refiner_layers)]
        )
        self.layers = nn.ModuleList([Lumina2TransformerBlock(c) for _ in range(c.num_layers)])
        self.norm_out = LuminaLayerNormContinuous(
            dim, c.time_embed_dim, c.patch_size**2 * c.out_channels
        )

    def rotary(self, op, positions, keep, like):
        """``(cos, sin)`` ``[batch, tokens, head_dim/2]`` of ``positions`` (``[batch or 1, tokens,
        3]``), zeroed where ``keep`` (``[batch, tokens, 1]`` or None) is false."""
        cos, sin = self.rope_embedder(op, positions)
        if keep is not None:
            keep = op.Cast(keep, to=ir.DataType.FLOAT)
            cos, sin = op.Mul(cos, keep), op.Mul(sin, keep)
        return op.CastLike(cos, like), op.CastLike(sin, like)

    def forward(self, op, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask):
        c, p = self.config, self.config.patch_size
        h, w = (op.Div(op.Shape(hidden_states, start=i, end=i + 1), _ints(op, [p])) for i in (2, 3))
        temb, caption = self.time_caption_embed(op, timestep, encoder_hidden_states, hidden_states)
        hidden = self.x_embedder(op, patchify(op, hidden_states, h, w, p, c.in_channels))

        # Each row's caption length; its first that many tokens are its caption, as in diffusers.
        lengths = op.ReduceSum(encoder_attention_mask, _ints(op, [1]), keepdims=1)  # [b, 1]
        tokens = op.Range(
            op.Constant(value_int=0),
            op.Squeeze(op.Shape(encoder_attention_mask, start=1, end=2)),
            op.Constant(value_int=1),
        )
        in_caption = op.Less(op.Unsqueeze(tokens, [0]), lengths)  # [b, sequence]
        token_ids = op.Cast(op.Unsqueeze(tokens, [1]), to=ir.DataType.FLOAT)  # [sequence, 1]
        caption_ids = op.Pad(token_ids, _ints(op, [0, 0, 0, 2]))  # (j, 0, 0)
        caption_rotary = self.rotary(
            op, op.Unsqueeze(caption_ids, [0]), op.Unsqueeze(in_caption, [2]), hidden
        )
        # Image patches sit at (caption length, row, column): one table per row.
        first_axis = op.Constant(value=ir.tensor(np.array([[[1, 0, 0]]], np.float32)))
        image_ids = op.Add(
            op.Unsqueeze(image_positions(op, h, w), [0]),
            op.Mul(op.Unsqueeze(op.Cast(lengths, to=ir.DataType.FLOAT), [2]), first_axis),
        )
        image_rotary = self.rotary(op, image_ids, None, hidden)

        caption_mask = caption_bias(op, encoder_attention_mask, caption)
        for block in self.context_refiner:
            caption = block(op, caption, caption_rotary, caption_mask)
        for block in self.noise_refiner:
            hidden = block(op, hidden, image_rotary, None, temb)

        joint = op.Concat(caption, hidden, axis=1)
        rotary = tuple(
            op.Concat(a, b, axis=1) for a, b in zip(caption_rotary, image_rotary, strict=True)
        )
        image_keys = op.Expand(
            op.Constant(value=ir.tensor(np.ones((1, 1), np.bool_))),
            op.Shape(hidden, start=0, end=2),
        )
        joint_mask = caption_bias(op, op.Concat(in_caption, image_keys, axis=1), joint)
        for block in self.layers:
            joint = block(op, joint, rotary, joint_mask, temb)
        hidden = op.Slice(
            joint, op.Shape(caption, start=1, end=2), op.Shape(joint, start=1, end=2), [1]
        )
        hidden = self.norm_out(op, hidden, temb)
        return unpatchify(op, hidden, h, w, p, c.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "timestep": (None, ["batch"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.cap_feat_dim]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
        }
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"Lumina2Transformer2DModel": Lumina2Transformer2DModel}
