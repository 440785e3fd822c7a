"""AuraFlow's transformer: MMDiT blocks, then single-stream DiT blocks, no biases, no rotary.

Latents are patched by a linear layer (``pos_embed.proj``) and get a learned
position table (``pos_embed.pos_embed``, a ``sqrt(pos_embed_max_size)``-wide
square) cropped at its centre to the patch grid. Eight learned
``register_tokens`` go before the projected text. Queries and keys are layer
normed per head (no weights, eps 1e-5). A block's residual differs from SD3's:
``x + gate_mlp * ff(modulate(norm2(x + gate_msa * attn)))``, the attention
reaching the stream only through the feed-forward (a SwiGLU, ``linear_1``,
``linear_2``, ``out_projection``). The final modulation has no norm.
Module tree and names follow diffusers' ``AuraFlowTransformer2DModel`` checkpoints
(``transformer/`` of ``fal/AuraFlow``, ``fal/AuraFlow-v0.2`` / ``-v0.3``).

Graph: :class:`mobius.tasks.DenoisingTask`, inputs as diffusers' forward names them:
``hidden_states`` float ``[batch, in_channels, latent_height, latent_width]``,
``encoder_hidden_states`` float ``[batch, sequence, joint_attention_dim]`` (the
pipeline's T5 states), ``timestep`` float ``[batch]`` (the pipeline's ``t / 1000``;
the sinusoid scales it by 1000) -> ``out_hidden_states``
``[batch, out_channels, latent_height, latent_width]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention
from mobius_diffusion.models._checks import config_int
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    AdaLayerNormZero,
    JointAttention,
    QKNormAttention,
    WeightlessLayerNorm,
    gated,
    modulate,
    unpatchify,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models.flux import image_tokens
from mobius_diffusion.tasks import GraphSpec

#: diffusers' ``FP32LayerNorm`` / ``Attention`` default: the eps of every AuraFlow norm.
_EPS = 1e-5
#: Learned tokens put before the text.
_REGISTER_TOKENS = 8


@dataclass
class AuraFlowConfig:
    patch_size: int = 2
    in_channels: int = 4
    num_mmdit_layers: int = 4
    num_single_dit_layers: int = 32
    attention_head_dim: int = 256
    num_attention_heads: int = 12
    joint_attention_dim: int = 2048
    out_channels: int = 4
    pos_embed_max_size: int = 1024

    @classmethod
    def from_hf(cls, config: Any) -> AuraFlowConfig:
        fields = {
            name: config_int(config, name, default, low=low)
            for name, default, low in (
                ("patch_size", 2, 1),
                ("in_channels", 4, 1),
                ("num_mmdit_layers", 4, 0),
                ("num_single_dit_layers", 32, 0),
                ("attention_head_dim", 256, 1),
                ("num_attention_heads", 12, 1),
                ("joint_attention_dim", 2048, 1),
                ("out_channels", 4, 1),
                ("pos_embed_max_size", 1024, 1),
            )
        }
        built = cls(**fields)
        caption = config_int(config, "caption_projection_dim", 3072)
        if caption != built.inner_dim:
            raise ConfigError(
                f"{config.model_type} caption_projection_dim {caption} is not built by mobius: "
                f"it builds num_attention_heads * attention_head_dim ({built.inner_dim})"
            )
        return built

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def _find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


class AuraFlowPatchEmbed(nn.Module):
    """``[b, c, H, W]`` -> ``(tokens [b, h*w, dim], h, w)``: linear patches plus the centre crop
    of the learned ``pos_embed`` square."""

    def __init__(self, patch_size: int, in_channels: int, dim: int, max_size: int) -> None:
        super().__init__()
        self.patch_size, self.in_channels = patch_size, in_channels
        self.side = int(max_size**0.5)  # diffusers' int(pos_embed_max_size ** 0.5)
        self.proj = Linear(patch_size * patch_size * in_channels, dim, bias=True)
        self.pos_embed = nn.Parameter([1, max_size, dim])

    def positions(self, op, h, w):
        """Indices ``[h*w]`` of the ``h x w`` window centred in the ``side x side`` table."""
        half = _ints(op, [self.side // 2])
        two = _ints(op, [2])
        one = op.Constant(value=ir.tensor(1, dtype=ir.DataType.INT64))
        starts = [op.Squeeze(op.Sub(half, op.Div(n, two))) for n in (h, w)]
        rows, cols = (
            op.Range(start, op.Add(start, op.Squeeze(n)), one)
            for start, n in zip(starts, (h, w), strict=True)
        )
        side = op.Constant(value=ir.tensor(self.side, dtype=ir.DataType.INT64))
        grid = op.Add(op.Mul(op.Unsqueeze(rows, [1]), side), op.Unsqueeze(cols, [0]))
        return op.Reshape(grid, _ints(op, [-1]))

    def forward(self, op, latent):
        p = self.patch_size
        h, w = (op.Div(op.Shape(latent, start=i, end=i + 1), _ints(op, [p])) for i in (2, 3))
        patches = op.Reshape(
            latent,
            op.Concat(
                _ints(op, [0, self.in_channels]), h, _ints(op, [p]), w, _ints(op, [p]), axis=0
            ),
        )
        patches = op.Transpose(patches, perm=[0, 2, 4, 1, 3, 5])  # [b, h, w, c, p, p]
        tokens = self.proj(op, op.Reshape(patches, _ints(op, [0, -1, self.in_channels * p * p])))
        table = op.Gather(self.pos_embed, self.positions(op, h, w), axis=1)
        return op.Add(tokens, op.CastLike(table, tokens)), h, w


class AuraFlowFeedForward(nn.Module):
    """SwiGLU: ``out_projection(silu(linear_1(x)) * linear_2(x))``, no biases."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        inner = _find_multiple(int(2 * hidden_dim / 3), 256)
        self.linear_1 = Linear(dim, inner, bias=False)
        self.linear_2 = Linear(dim, inner, bias=False)
        self.out_projection = Linear(inner, dim, bias=False)

    def forward(self, op, x):
        gate = self.linear_1(op, x)
        return self.out_projection(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), self.linear_2(op, x)))


def _bias_free_attention(module: Attention, dim: int, heads: int, dim_head: int) -> None:
    """Give ``module`` diffusers' AuraFlow layers: projections without bias, weightless per-head
    LayerNorms of the queries and keys (the norms Flux's attention makes RMS)."""
    Attention.__init__(module, dim, heads, dim_head, bias=False, out_bias=False)
    module.norm_q = WeightlessLayerNorm(dim_head, _EPS)
    module.norm_k = WeightlessLayerNorm(dim_head, _EPS)


class AuraFlowAttention(QKNormAttention):
    """Self-attention of the single-stream blocks."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        _bias_free_attention(self, dim, heads, dim_head)


class AuraFlowJointAttention(JointAttention):
    """Joint attention of ``[text, image]`` (text first, as diffusers' AuraFlow processor)."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        _bias_free_attention(self, dim, heads, dim_head)
        inner = heads * dim_head
        self.add_q_proj = Linear(dim, inner, bias=False)
        self.add_k_proj = Linear(dim, inner, bias=False)
        self.add_v_proj = Linear(dim, inner, bias=False)
        self.norm_added_q = WeightlessLayerNorm(dim_head, _EPS)
        self.norm_added_k = WeightlessLayerNorm(dim_head, _EPS)
        self.to_add_out = Linear(inner, dim, bias=False)


class _Stream(nn.Module):
    """One stream's modulation (``norm1``), post-attention norm (``norm2``) and feed-forward."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1 = AdaLayerNormZero(dim, bias=False, eps=_EPS)
        self.norm2 = WeightlessLayerNorm(dim, _EPS)
        self.ff = AuraFlowFeedForward(dim, 4 * dim)

    @staticmethod
    def update(op, x, attn, modulation, norm2, ff):
        """``x + gate_mlp * ff(modulate(norm2(x + gate_msa * attn)))``."""
        gate_msa, shift_mlp, scale_mlp, gate_mlp = modulation
        hidden = modulate(op, norm2(op, op.Add(x, gated(op, gate_msa, attn))), shift_mlp, scale_mlp)
        return op.Add(x, gated(op, gate_mlp, ff(op, hidden)))


class AuraFlowSingleTransformerBlock(_Stream):
    """A DiT block over the joint sequence."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__(dim)
        self.attn = AuraFlowAttention(dim, heads, dim_head)

    def forward(self, op, x, temb):
        normed, *modulation = self.norm1(op, x, temb)
        return self.update(op, x, self.attn(op, normed), modulation, self.norm2, self.ff)


class AuraFlowJointTransformerBlock(_Stream):
    """An MMDiT block: image and text streams (``*_context``) in one attention."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__(dim)
        self.norm1_context = AdaLayerNormZero(dim, bias=False, eps=_EPS)
        self.attn = AuraFlowJointAttention(dim, heads, dim_head)
        self.norm2_context = WeightlessLayerNorm(dim, _EPS)
        self.ff_context = AuraFlowFeedForward(dim, 4 * dim)

    def forward(self, op, hidden, context, temb):
        """-> ``(context, hidden)``."""
        normed, *modulation = self.norm1(op, hidden, temb)
        context_normed, *context_modulation = self.norm1_context(op, context, temb)
        attn, context_attn = self.attn(op, normed, context_normed)
        hidden = self.update(op, hidden, attn, modulation, self.norm2, self.ff)
        context = self.update(
            op, context, context_attn, context_modulation, self.norm2_context, self.ff_context
        )
        return context, hidden


class AuraFlowPreFinalBlock(AdaLayerNormContinuous):
    """``x * (1 + scale) + shift`` from ``linear(silu(temb))`` (no bias): no norm of ``x``."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim, bias=False)

    def forward(self, op, x, emb):
        scale, shift = self.modulation(op, emb)
        return modulate(op, x, shift, scale)


class AuraFlowTransformer2DModel(Model):
    """diffusers' ``AuraFlowTransformer2DModel`` (AuraFlow v0.1 - v0.3 and tiny relatives)."""

    config_class = AuraFlowConfig
    task = "denoising"

    def __init__(self, config: AuraFlowConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        dim, heads, head_dim = c.inner_dim, c.num_attention_heads, c.attention_head_dim
        self.pos_embed = AuraFlowPatchEmbed(c.patch_size, c.in_channels, dim, c.pos_embed_max_size)
        self.context_embedder = Linear(c.joint_attention_dim, dim, bias=False)
        self.time_step_embed = Timesteps(
            256, flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000
        )
        self.time_step_proj = TimestepEmbedding(256, dim)
        self.joint_transformer_blocks = nn.ModuleList(
            [AuraFlowJointTransformerBlock(dim, heads, head_dim) for _ in range(c.num_mmdit_layers)]
        )
        self.single_transformer_blocks = nn.ModuleList(
            [
                AuraFlowSingleTransformerBlock(dim, heads, head_dim)
                for _ in range(c.num_single_dit_layers)
            ]
        )
        self.norm_out = AuraFlowPreFinalBlock(dim)
        self.proj_out = Linear(dim, c.patch_size**2 * c.out_channels, bias=False)
        self.register_tokens = nn.Parameter([1, _REGISTER_TOKENS, dim])

    def forward(self, op, hidden_states, encoder_hidden_states, timestep):
        c = self.config
        hidden, h, w = self.pos_embed(op, hidden_states)
        temb = self.time_step_proj(op, self.time_step_embed(op, timestep, hidden))
        context = self.context_embedder(op, encoder_hidden_states)
        registers = op.Expand(
            op.CastLike(self.register_tokens, context),
            op.Concat(op.Shape(context, start=0, end=1), _ints(op, [1, 1]), axis=0),
        )
        context = op.Concat(registers, context, axis=1)
        for block in self.joint_transformer_blocks:
            context, hidden = block(op, hidden, context, temb)
        if len(self.single_transformer_blocks):
            joint = op.Concat(context, hidden, axis=1)
            for block in self.single_transformer_blocks:
                joint = block(op, joint, temb)
            hidden = image_tokens(op, joint, context)
        out = self.proj_out(op, self.norm_out(op, hidden, temb))
        return unpatchify(op, out, h, w, c.patch_size, c.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "timestep": (None, ["batch"]),
        }
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"AuraFlowTransformer2DModel": AuraFlowTransformer2DModel}
