"""HunyuanVideo's transformer: a token refiner over the Llama states, then Flux-like blocks.

The text (the Llama states the pipeline crops out of its prompt template) goes through
``context_embedder``: ``proj_in``, then refiner blocks (self-attention over the
text's own tokens and a SiLU feed-forward, both residuals gated by ``norm_out`` of
``temb``; ``temb`` is the timestep plus the masked mean of the text). The latent
video ``[b, C, F, H, W]`` is cut into ``p_t x p x p`` patches by a strided 3-D conv.
``temb`` of the main blocks sums the timestep, the pooled CLIP text projection and
(``guidance_embeds``) the guidance scale, each through its own embedder. Then
double-stream blocks (Flux's, per-head RMS norms of queries and keys) and
single-stream blocks over [text, image]; rotary positions (theta ``rope_theta``,
``rope_axes_dim`` channels per axis, adjacent pairs) are each patch's
``(frame, row, column)``; the text is not rotated.

diffusers puts the image first in the joint sequence and masks the text keys after
each row's ``sum(mask)`` real tokens; here the text goes first (Flux's blocks), text
tokens sit at position ``(0, 0, 0)`` (a zero rotation) and the same keys are masked:
every query sees the same keys, so the result is the same. The refiner's mask is
diffusers' too: a query attends to keys where both are real, and always to key 0.

Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, in_channels,
frames, latent_height, latent_width], ``timestep`` [batch] (the scheduler's ``t``,
in [0, 1000]), ``encoder_hidden_states`` [batch, sequence, text_embed_dim],
``encoder_attention_mask`` int64 [batch, sequence], ``pooled_projections`` [batch,
pooled_projection_dim] (and ``guidance`` [batch], the pipeline's scale times 1000)
-> ``out_hidden_states`` [batch, out_channels, frames, latent_height, latent_width].
``image_condition_type: "latent_concat"`` (I2V: the image latents are concatenated to
the channels by the pipeline) changes nothing in the graph; ``"token_replace"`` is not
built. Module tree and names follow diffusers' ``HunyuanVideoTransformer3DModel``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv3d, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._checks import config_choice, config_float, config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    AxesRotary,
    CombinedTimestepTextProjEmbeddings,
    JointTransformerBlock,
    _ints,
    gated,
)
from mobius_diffusion.models.chroma import (
    ChromaJointAttention,
    ChromaSingleAttention,
    MaskedRotary,
)
from mobius_diffusion.models.flux import (
    CombinedTimestepGuidanceTextProjEmbeddings,
    FluxSingleTransformerBlock,
    image_tokens,
    joint_rotary,
)
from mobius_diffusion.tasks import GraphSpec

#: diffusers' key bias of a masked token: exp() of it is 0 in float32, as a boolean mask.
_MASKED = -10000.0


@dataclass
class HunyuanVideoConfig:
    in_channels: int = 16
    out_channels: int = 16
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    num_layers: int = 20
    num_single_layers: int = 40
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size: int = 2
    patch_size_t: int = 1
    guidance_embeds: bool = True
    text_embed_dim: int = 4096
    pooled_projection_dim: int = 768
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)

    @classmethod
    def from_hf(cls, config: Any) -> HunyuanVideoConfig:
        head_dim = config_int(config, "attention_head_dim", 128)
        axes = config_ints(config, "rope_axes_dim", (16, 56, 56), count=3)
        if sum(axes) != head_dim or any(d % 2 for d in axes):
            raise ConfigError(
                f"{config.model_type} rope_axes_dim {list(axes)} must be even and sum to "
                f"attention_head_dim {head_dim}"
            )
        config_choice(config, "qk_norm", "rms_norm", ("rms_norm",))
        # latent_concat: the pipeline's channels, the same graph; token_replace: other blocks.
        config_choice(config, "image_condition_type", None, (None, "latent_concat"))
        guidance = getattr(config, "guidance_embeds", True)
        if not isinstance(guidance, bool):
            raise ConfigError(
                f"{config.model_type} guidance_embeds must be a boolean: {guidance!r}"
            )
        in_channels = config_int(config, "in_channels", 16)
        c = cls(
            in_channels=in_channels,
            out_channels=config_int(config, "out_channels", None)
            if getattr(config, "out_channels", None)
            else in_channels,
            num_attention_heads=config_int(config, "num_attention_heads", 24),
            attention_head_dim=head_dim,
            num_layers=config_int(config, "num_layers", 20, low=0),
            num_single_layers=config_int(config, "num_single_layers", 40, low=0),
            num_refiner_layers=config_int(config, "num_refiner_layers", 2, low=0),
            mlp_ratio=config_float(config, "mlp_ratio", 4.0),
            patch_size=config_int(config, "patch_size", 2),
            patch_size_t=config_int(config, "patch_size_t", 1),
            guidance_embeds=guidance,
            text_embed_dim=config_int(config, "text_embed_dim", 4096),
            pooled_projection_dim=config_int(config, "pooled_projection_dim", 768),
            rope_theta=config_float(config, "rope_theta", 256.0),
            rope_axes_dim=axes,
        )
        if c.mlp_dim < 1:
            raise ConfigError(f"{config.model_type} mlp_ratio {c.mlp_ratio} leaves no MLP width")
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def mlp_dim(self) -> int:
        return int(self.inner_dim * self.mlp_ratio)

    @property
    def patch(self) -> tuple[int, int, int]:
        return (self.patch_size_t, self.patch_size, self.patch_size)


def key_bias(op, keep, queries):
    """``keep`` bool ``[batch, keys]`` -> the score bias ``[batch, 1, queries, keys]``, float32."""
    bias = op.Mul(op.Sub(1.0, op.Cast(keep, to=ir.DataType.FLOAT)), _MASKED)
    shape = op.Concat(_ints(op, [1, 1]), queries, _ints(op, [1]), axis=0)
    return op.Expand(op.Unsqueeze(bias, _ints(op, [1, 2])), shape)


def positions(op, n):
    """``0 .. n-1`` int64, ``n`` int64 ``[1]``."""
    return op.Range(op.Constant(value_int=0), op.Squeeze(n), op.Constant(value_int=1))


def grid_positions(op, grid):
    """``grid`` int64 [3] (frames, rows, columns) -> float32 ``[f*h*w, 3]``, row-major."""
    axes = []
    for i in range(3):
        steps = positions(op, op.Slice(grid, _ints(op, [i]), _ints(op, [i + 1])))
        view = [1, 1, 1]
        view[i] = -1
        axes.append(op.Reshape(op.Expand(op.Reshape(steps, _ints(op, view)), grid), [-1, 1]))
    return op.Cast(op.Concat(*axes, axis=1), to=ir.DataType.FLOAT)


class MaskedAttention(Attention):
    """The refiner's self-attention (biased projections) with a score bias."""

    def forward(self, op, hidden, bias):
        q, k, v = self.to_q(op, hidden), self.to_k(op, hidden), self.to_v(op, hidden)
        return self.to_out[0](op, self.attend(op, q, k, v, bias))


class HunyuanVideoAdaNorm(nn.Module):
    """``linear(silu(temb))`` split into the refiner block's two gates."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = Linear(dim, 2 * dim, bias=True)

    def forward(self, op, temb):
        emb = self.linear(op, op.Mul(temb, op.Sigmoid(temb)))
        return op.Split(emb, axis=1, num_outputs=2, _outputs=2)


class HunyuanVideoIndividualTokenRefinerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm1 = LayerNorm(dim, 1e-6)
        self.attn = MaskedAttention(dim, heads, head_dim, bias=True)
        self.norm2 = LayerNorm(dim, 1e-6)
        self.ff = FeedForward(dim, inner_dim=mlp_dim, activation_fn="linear-silu")
        self.norm_out = HunyuanVideoAdaNorm(dim)

    def forward(self, op, x, temb, bias):
        gate_msa, gate_mlp = self.norm_out(op, temb)
        x = op.Add(x, gated(op, gate_msa, self.attn(op, self.norm1(op, x), bias)))
        return op.Add(x, gated(op, gate_mlp, self.ff(op, self.norm2(op, x))))


class HunyuanVideoIndividualTokenRefiner(nn.Module):
    def __init__(self, c: HunyuanVideoConfig) -> None:
        super().__init__()
        self.refiner_blocks = nn.ModuleList(
            [
                # diffusers gives the refiner its default ratio, 4, whatever mlp_ratio says
                HunyuanVideoIndividualTokenRefinerBlock(
                    c.inner_dim, c.num_attention_heads, c.attention_head_dim, 4 * c.inner_dim
                )
                for _ in range(c.num_refiner_layers)
            ]
        )

    def forward(self, op, x, temb, bias):
        for block in self.refiner_blocks:
            x = block(op, x, temb, bias)
        return x


class HunyuanVideoTokenRefiner(nn.Module):
    """``proj_in`` and the refiner blocks, conditioned on the timestep and the mean text state."""

    def __init__(self, c: HunyuanVideoConfig) -> None:
        super().__init__()
        self.time_text_embed = CombinedTimestepTextProjEmbeddings(c.inner_dim, c.text_embed_dim)
        self.proj_in = Linear(c.text_embed_dim, c.inner_dim, bias=True)
        self.token_refiner = HunyuanVideoIndividualTokenRefiner(c)

    def forward(self, op, text, timestep, mask):
        keep = op.Unsqueeze(op.CastLike(mask, text), [2])  # [b, s, 1]
        pooled = op.Div(
            op.ReduceSum(op.Mul(text, keep), [1], keepdims=0), op.ReduceSum(keep, [1], keepdims=0)
        )
        temb = self.time_text_embed(op, timestep, pooled)
        x = self.proj_in(op, text)
        # query i sees key j when both are real; every query sees key 0
        real = op.Cast(mask, to=ir.DataType.BOOL)
        pairs = op.And(op.Unsqueeze(real, [1, 3]), op.Unsqueeze(real, [1, 2]))  # [b, 1, s, s]
        first = op.Equal(positions(op, op.Shape(mask, start=1, end=2)), op.Constant(value_int=0))
        bias = op.Mul(op.Sub(1.0, op.Cast(op.Or(pairs, first), to=ir.DataType.FLOAT)), _MASKED)
        return self.token_refiner(op, x, temb, op.CastLike(bias, x))


class HunyuanVideoTransformerBlock(JointTransformerBlock):
    """Flux's double-stream block with the text keys' mask and ``mlp_ratio`` feed-forwards."""

    def __init__(self, dim: int, heads: int, head_dim: int, mlp_dim: int) -> None:
        super().__init__(dim, heads, head_dim, qk_norm=True)
        self.attn = ChromaJointAttention(dim, heads, head_dim, qk_norm=True)
        self.ff = FeedForward(dim, inner_dim=mlp_dim, activation_fn="gelu-approximate")
        self.ff_context = FeedForward(dim, inner_dim=mlp_dim, activation_fn="gelu-approximate")


class HunyuanVideoSingleTransformerBlock(FluxSingleTransformerBlock):
    """Flux's single-stream block with the text keys' mask."""

    def __init__(self, dim: int, heads: int, head_dim: int, mlp_ratio: float) -> None:
        super().__init__(dim, heads, head_dim, mlp_ratio)
        self.attn = ChromaSingleAttention(dim, heads, head_dim)


class HunyuanVideoPatchEmbed(nn.Module):
    def __init__(self, patch: tuple[int, int, int], in_channels: int, dim: int) -> None:
        super().__init__()
        self.proj = Conv3d(in_channels, dim, patch, stride=patch)

    def forward(self, op, video):
        """``[b, C, F, H, W]`` -> ``(tokens [b, f*h*w, dim], grid int64 [3])``."""
        x = self.proj(op, video)  # [b, dim, f, h, w]
        tokens = op.Transpose(op.Reshape(x, _ints(op, [0, 0, -1])), perm=[0, 2, 1])
        return tokens, op.Shape(x, start=2)


class HunyuanVideoTransformer3DModel(Model):
    """diffusers' ``HunyuanVideoTransformer3DModel`` (HunyuanVideo T2V); see the module docstring."""

    config_class = HunyuanVideoConfig
    task = "denoising"

    def __init__(self, config: HunyuanVideoConfig) -> None:
        super().__init__()
        c = self.config = config
        dim, heads, head_dim = c.inner_dim, c.num_attention_heads, c.attention_head_dim
        self.x_embedder = HunyuanVideoPatchEmbed(c.patch, c.in_channels, dim)
        self.context_embedder = HunyuanVideoTokenRefiner(c)
        embed = (
            CombinedTimestepGuidanceTextProjEmbeddings
            if c.guidance_embeds
            else CombinedTimestepTextProjEmbeddings
        )
        self.time_text_embed = embed(dim, c.pooled_projection_dim)
        self.rope = AxesRotary(c.rope_axes_dim, c.rope_theta)
        self.transformer_blocks = nn.ModuleList(
            [
                HunyuanVideoTransformerBlock(dim, heads, head_dim, c.mlp_dim)
                for _ in range(c.num_layers)
            ]
        )
        self.single_transformer_blocks = nn.ModuleList(
            [
                HunyuanVideoSingleTransformerBlock(dim, heads, head_dim, c.mlp_ratio)
                for _ in range(c.num_single_layers)
            ]
        )
        self.norm_out = AdaLayerNormContinuous(dim)
        self.proj_out = Linear(dim, int(np.prod(c.patch)) * c.out_channels, bias=True)

    def unpatchify(self, op, x, grid):
        """``[b, f*h*w, C*p_t*p*p]`` -> ``[b, C, f*p_t, h*p, w*p]`` (channels first in a token)."""
        c = self.config
        x = op.Reshape(
            x, op.Concat(_ints(op, [0]), grid, _ints(op, [c.out_channels, *c.patch]), axis=0)
        )
        x = op.Transpose(x, perm=[0, 4, 1, 5, 2, 6, 3, 7])  # [b, C, f, p_t, h, p, w, p]
        sizes = op.Mul(grid, _ints(op, c.patch))
        return op.Reshape(x, op.Concat(_ints(op, [0, c.out_channels]), sizes, axis=0))

    def forward(
        self,
        op,
        hidden_states,
        timestep,
        encoder_hidden_states,
        encoder_attention_mask,
        pooled_projections,
        guidance=None,
    ):
        hidden, grid = self.x_embedder(op, hidden_states)
        if guidance is None:
            temb = self.time_text_embed(op, timestep, pooled_projections)
        else:
            temb = self.time_text_embed(op, timestep, pooled_projections, guidance)
        context = self.context_embedder(op, encoder_hidden_states, timestep, encoder_attention_mask)
        text = op.Shape(context, start=1, end=2)
        text_ids = op.ConstantOfShape(op.Concat(text, _ints(op, [3]), axis=0))  # float zeros
        rotary = joint_rotary(op, self.rope, hidden, text_ids, grid_positions(op, grid))
        # keys: each row's first sum(mask) text tokens, and every image token
        lengths = op.ReduceSum(encoder_attention_mask, _ints(op, [1]), keepdims=1)  # [b, 1]
        in_text = op.Less(op.Unsqueeze(positions(op, text), [0]), lengths)
        image_keys = op.Expand(
            op.Constant(value=ir.tensor(np.ones((1, 1), np.bool_))),
            op.Shape(hidden, start=0, end=2),
        )
        keep = op.Concat(in_text, image_keys, axis=1)
        bias = op.CastLike(key_bias(op, keep, op.Shape(keep, start=1, end=2)), hidden)
        masked = MaskedRotary(rotary, bias)
        for block in self.transformer_blocks:
            context, hidden = block(op, hidden, context, temb, masked)
        joint = op.Concat(context, hidden, axis=1)
        for block in self.single_transformer_blocks:
            joint = block(op, joint, temb, masked)
        hidden = self.norm_out(op, image_tokens(op, joint, context), temb)
        return self.unpatchify(op, self.proj_out(op, hidden), grid)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        video = ["batch", c.in_channels, "frames", "latent_height", "latent_width"]
        inputs = {
            "hidden_states": (None, video),
            "timestep": (None, ["batch"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.text_embed_dim]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "pooled_projections": (None, ["batch", c.pooled_projection_dim]),
        }
        if c.guidance_embeds:
            inputs["guidance"] = (None, ["batch"])
        out = ["batch", c.out_channels, "frames", "latent_height", "latent_width"]

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, {"out_hidden_states": out}, forward)}


MODEL_TYPES = {"HunyuanVideoTransformer3DModel": HunyuanVideoTransformer3DModel}
