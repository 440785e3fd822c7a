"""Flux.2's transformer: Flux's double- then single-stream layout, rebuilt lighter.

What differs from :mod:`flux`:

- modulation is shared: three ``Flux2Modulation`` linears at the top level
  (``double_stream_modulation_img`` / ``_txt``, ``single_stream_modulation``)
  turn ``temb`` into every block's shifts, scales and gates; the blocks' norms are
  plain weightless LayerNorms;
- ``temb`` is the timestep embedding (plus the guidance embedding when
  ``guidance_embeds``): no pooled text;
- the feed-forwards are SwiGLU (``linear_in`` to twice the hidden width,
  ``silu(first half) * second half``, ``linear_out``);
- a single-stream block is one fused projection ``to_qkv_mlp_proj`` (queries,
  keys, values and the SwiGLU input) and one ``to_out`` over ``[attention, mlp]``;
- no linear layer has a bias;
- the rotary embedding has 4 axes (``t, h, w, l``) at ``rope_theta`` (2000).

Module tree and names follow diffusers' ``Flux2Transformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, image_tokens,
in_channels] (packed latents), ``encoder_hidden_states`` [batch, sequence,
joint_attention_dim], ``timestep`` [batch] (the pipeline's ``t / 1000``),
``img_ids`` [image_tokens, axes], ``txt_ids`` [sequence, axes] (and ``guidance``
[batch] when ``guidance_embeds``) -> ``out_hidden_states``. The reference-image
KV cache of diffusers' Klein KV pipeline is not built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear, RMSNorm, bidirectional_attention
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_float, config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    AxesRotary,
    JointAttention,
    QKNormAttention,
    WeightlessLayerNorm,
    _ints,
    gated,
    modulate,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models.flux import image_tokens, joint_rotary
from mobius_diffusion.tasks import GraphSpec


@dataclass
class Flux2Config:
    patch_size: int = 1
    in_channels: int = 128
    out_channels: int | None = None
    num_layers: int = 8
    num_single_layers: int = 48
    attention_head_dim: int = 128
    num_attention_heads: int = 48
    joint_attention_dim: int = 15360
    timestep_guidance_channels: int = 256
    mlp_ratio: float = 3.0
    axes_dims_rope: tuple[int, ...] = (32, 32, 32, 32)
    rope_theta: float = 2000.0
    eps: float = 1e-6
    guidance_embeds: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> Flux2Config:
        ints = {
            name: config_int(config, name, default)
            for name, default in (
                ("patch_size", 1),
                ("in_channels", 128),
                ("num_layers", 8),
                ("num_single_layers", 48),
                ("attention_head_dim", 128),
                ("num_attention_heads", 48),
                ("joint_attention_dim", 15360),
                ("timestep_guidance_channels", 256),
            )
        }
        axes = config_ints(config, "axes_dims_rope", (32, 32, 32, 32))
        if sum(axes) != ints["attention_head_dim"] or any(d % 2 for d in axes):
            raise ConfigError(
                f"{config.model_type} axes_dims_rope {list(axes)} must be even and sum to "
                f"attention_head_dim {ints['attention_head_dim']}"
            )
        out_channels = getattr(config, "out_channels", None)
        if out_channels is not None:
            out_channels = config_int(config, "out_channels")
        guidance = getattr(config, "guidance_embeds", True)
        if not isinstance(guidance, bool):
            raise ConfigError(
                f"{config.model_type} guidance_embeds must be a bool, got {guidance!r}"
            )
        return cls(
            **ints,
            out_channels=out_channels,
            mlp_ratio=config_float(config, "mlp_ratio", 3.0),
            axes_dims_rope=axes,
            rope_theta=config_float(config, "rope_theta", 2000),
            eps=config_float(config, "eps", 1e-6),
            guidance_embeds=guidance,
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def mlp_hidden_dim(self) -> int:
        return int(self.inner_dim * self.mlp_ratio)


class Flux2TimestepGuidanceEmbeddings(nn.Module):
    """The timestep's sinusoid through ``timestep_embedder`` (plus the guidance's, if embedded)."""

    def __init__(self, channels: int, dim: int, guidance_embeds: bool) -> None:
        super().__init__()
        self.time_proj = Timesteps(channels, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(channels, dim, bias=False)
        self.guidance_embedder = (
            TimestepEmbedding(channels, dim, bias=False) if guidance_embeds else None
        )

    def forward(self, op, timestep, guidance, like):
        temb = self.timestep_embedder(op, self.time_proj(op, timestep, like))
        if self.guidance_embedder is None:
            return temb
        return op.Add(temb, self.guidance_embedder(op, self.time_proj(op, guidance, like)))


class Flux2Modulation(nn.Module):
    """``linear(silu(temb))`` split into ``sets`` triples of ``(shift, scale, gate)`` ``[batch, dim]``."""

    def __init__(self, dim: int, sets: int) -> None:
        super().__init__()
        self.sets = sets
        self.linear = Linear(dim, 3 * sets * dim, bias=False)

    def forward(self, op, temb):
        mod = self.linear(op, op.Mul(temb, op.Sigmoid(temb)))
        chunks = op.Split(mod, axis=1, num_outputs=3 * self.sets, _outputs=3 * self.sets)
        return [tuple(chunks[3 * i : 3 * i + 3]) for i in range(self.sets)]


def swiglu(op, x):
    """``silu(x[..., :half]) * x[..., half:]``."""
    gate, value = op.Split(x, axis=-1, num_outputs=2, _outputs=2)
    return op.Mul(op.Mul(gate, op.Sigmoid(gate)), value)


class Flux2FeedForward(nn.Module):
    """``linear_out(swiglu(linear_in(x)))``, no biases."""

    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.linear_in = Linear(dim, 2 * inner, bias=False)
        self.linear_out = Linear(inner, dim, bias=False)

    def forward(self, op, x):
        return self.linear_out(op, swiglu(op, self.linear_in(op, x)))


class Flux2TransformerBlock(nn.Module):
    """A double-stream block: joint attention, then a SwiGLU per stream, modulated from outside."""

    def __init__(self, dim: int, heads: int, dim_head: int, mlp_hidden: int, eps: float) -> None:
        super().__init__()
        self.norm1 = WeightlessLayerNorm(dim, eps)
        self.norm1_context = WeightlessLayerNorm(dim, eps)
        self.attn = JointAttention(dim, heads, dim_head, qk_norm=True, eps=eps, bias=False)
        self.norm2 = WeightlessLayerNorm(dim, eps)
        self.ff = Flux2FeedForward(dim, mlp_hidden)
        self.norm2_context = WeightlessLayerNorm(dim, eps)
        self.ff_context = Flux2FeedForward(dim, mlp_hidden)

    def forward(self, op, hidden, context, mod_img, mod_txt, rotary):
        """-> ``(context, hidden)``; ``mod_*`` are ``(attention triple, feed-forward triple)``."""
        (shift, scale, gate), (shift_ff, scale_ff, gate_ff) = mod_img
        (c_shift, c_scale, c_gate), (c_shift_ff, c_scale_ff, c_gate_ff) = mod_txt
        attn, context_attn = self.attn(
            op,
            modulate(op, self.norm1(op, hidden), shift, scale),
            modulate(op, self.norm1_context(op, context), c_shift, c_scale),
            rotary,
        )
        hidden = op.Add(hidden, gated(op, gate, attn))
        ff = self.ff(op, modulate(op, self.norm2(op, hidden), shift_ff, scale_ff))
        hidden = op.Add(hidden, gated(op, gate_ff, ff))
        context = op.Add(context, gated(op, c_gate, context_attn))
        ff = self.ff_context(
            op, modulate(op, self.norm2_context(op, context), c_shift_ff, c_scale_ff)
        )
        return op.Add(context, gated(op, c_gate_ff, ff)), hidden


class Flux2ParallelSelfAttention(nn.Module):
    """One projection to ``[q, k, v, SwiGLU input]``; attention and MLP side by side; one ``to_out``."""

    def __init__(self, dim: int, heads: int, dim_head: int, mlp_hidden: int, eps: float) -> None:
        super().__init__()
        self.heads, self.dim_head, self.mlp_hidden = heads, dim_head, mlp_hidden
        inner = heads * dim_head
        self.to_qkv_mlp_proj = Linear(dim, 3 * inner + 2 * mlp_hidden, bias=False)
        self.norm_q = RMSNorm(dim_head, eps)
        self.norm_k = RMSNorm(dim_head, eps)
        self.to_out = Linear(inner + mlp_hidden, dim, bias=False)

    # the per-head norm and the rotation of Flux's attention
    head_norm, rotate = QKNormAttention.head_norm, QKNormAttention.rotate

    def forward(self, op, x, rotary):
        inner = self.heads * self.dim_head
        q, k, v, mlp = op.Split(
            self.to_qkv_mlp_proj(op, x),
            _ints(op, [inner, inner, inner, 2 * self.mlp_hidden]),
            axis=-1,
            _outputs=4,
        )
        q = self.rotate(op, self.head_norm(op, self.norm_q, q), rotary)
        k = self.rotate(op, self.head_norm(op, self.norm_k, k), rotary)
        out = bidirectional_attention(op, q, k, v, None, self.heads, self.dim_head**-0.5)
        return self.to_out(op, op.Concat(out, swiglu(op, mlp), axis=-1))


class Flux2SingleTransformerBlock(nn.Module):
    """``x + gate * attn(modulate(norm(x)))`` over the joint ``[text, image]`` sequence."""

    def __init__(self, dim: int, heads: int, dim_head: int, mlp_hidden: int, eps: float) -> None:
        super().__init__()
        self.norm = WeightlessLayerNorm(dim, eps)
        self.attn = Flux2ParallelSelfAttention(dim, heads, dim_head, mlp_hidden, eps)

    def forward(self, op, x, mod, rotary):
        shift, scale, gate = mod
        return op.Add(
            x, gated(op, gate, self.attn(op, modulate(op, self.norm(op, x), shift, scale), rotary))
        )


class Flux2Transformer2DModel(Model):
    """diffusers' ``Flux2Transformer2DModel`` (FLUX.2 dev and Klein)."""

    config_class = Flux2Config
    task = "denoising"

    def __init__(self, config: Flux2Config) -> None:
        super().__init__()
        self.config = config
        dim, heads, head_dim = (
            config.inner_dim,
            config.num_attention_heads,
            config.attention_head_dim,
        )
        mlp, eps = config.mlp_hidden_dim, config.eps
        self.pos_embed = AxesRotary(config.axes_dims_rope, config.rope_theta)
        self.time_guidance_embed = Flux2TimestepGuidanceEmbeddings(
            config.timestep_guidance_channels, dim, config.guidance_embeds
        )
        self.double_stream_modulation_img = Flux2Modulation(dim, 2)
        self.double_stream_modulation_txt = Flux2Modulation(dim, 2)
        self.single_stream_modulation = Flux2Modulation(dim, 1)
        self.x_embedder = Linear(config.in_channels, dim, bias=False)
        self.context_embedder = Linear(config.joint_attention_dim, dim, bias=False)
        self.transformer_blocks = nn.ModuleList(
            [
                Flux2TransformerBlock(dim, heads, head_dim, mlp, eps)
                for _ in range(config.num_layers)
            ]
        )
        self.single_transformer_blocks = nn.ModuleList(
            [
                Flux2SingleTransformerBlock(dim, heads, head_dim, mlp, eps)
                for _ in range(config.num_single_layers)
            ]
        )
        self.norm_out = AdaLayerNormContinuous(dim, bias=False, eps=eps)
        self.proj_out = Linear(dim, config.patch_size**2 * self.out_channels, bias=False)

    @property
    def out_channels(self) -> int:
        return self.config.out_channels or self.config.in_channels

    def forward(
        self, op, hidden_states, encoder_hidden_states, timestep, img_ids, txt_ids, guidance=None
    ):
        hidden = self.x_embedder(op, hidden_states)
        # the pipeline passes t / 1000 (and no guidance to a model without its embedding)
        guidance = None if guidance is None else op.Mul(guidance, 1000.0)
        temb = self.time_guidance_embed(op, op.Mul(timestep, 1000.0), guidance, hidden)
        mod_img = self.double_stream_modulation_img(op, temb)
        mod_txt = self.double_stream_modulation_txt(op, temb)
        (mod_single,) = self.single_stream_modulation(op, temb)
        context = self.context_embedder(op, encoder_hidden_states)
        rotary = joint_rotary(op, self.pos_embed, hidden, txt_ids, img_ids)
        for block in self.transformer_blocks:
            context, hidden = block(op, hidden, context, mod_img, mod_txt, rotary)
        joint = op.Concat(context, hidden, axis=1)  # [batch, text + image, dim]
        for block in self.single_transformer_blocks:
            joint = block(op, joint, mod_single, rotary)
        return self.proj_out(op, self.norm_out(op, image_tokens(op, joint, context), temb))

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        axes = len(c.axes_dims_rope)
        inputs = {
            "hidden_states": (None, ["batch", "image_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "timestep": (None, ["batch"]),
            "img_ids": (None, ["image_tokens", axes]),
            "txt_ids": (None, ["sequence", axes]),
        }
        if c.guidance_embeds:
            inputs["guidance"] = (None, ["batch"])
        outputs = {
            "out_hidden_states": ["batch", "image_tokens", c.patch_size**2 * self.out_channels]
        }

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"Flux2Transformer2DModel": Flux2Transformer2DModel}
