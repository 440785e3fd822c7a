"""DiT: a class-conditional transformer on patchified latents (Peebles & Xie, ImageNet).

Every block modulates its self-attention and MLP with ``AdaLayerNormZero`` whose
conditioning is the block's own timestep + class-label embedding; the output
layer reuses the first block's embedding. With a learned sigma the output has
twice the input channels (noise prediction | variance). Module tree and names
follow diffusers' ``DiTTransformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``timestep`` [batch], ``class_labels`` int64 [batch]
-> ``out_hidden_states`` [batch, out_channels, latent_height, latent_width].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormZero,
    PatchEmbed,
    WeightlessLayerNorm,
    gated,
    layer_norm,
    modulate,
    unpatchify,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.tasks import GraphSpec


@dataclass
class DiTConfig:
    num_attention_heads: int = 16
    attention_head_dim: int = 72
    in_channels: int = 4
    out_channels: int | None = None
    num_layers: int = 28
    attention_bias: bool = True
    sample_size: int = 32
    patch_size: int = 2
    activation_fn: str = "gelu-approximate"
    num_embeds_ada_norm: int = 1000
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-5

    @classmethod
    def from_hf(cls, config: Any) -> DiTConfig:
        norm_type = getattr(config, "norm_type", "ada_norm_zero")
        if norm_type != "ada_norm_zero" or getattr(config, "num_embeds_ada_norm", 1000) is None:
            raise ConfigError(
                f"DiT norm_type {norm_type!r} needs ada_norm_zero with num_embeds_ada_norm"
            )
        if getattr(config, "upcast_attention", False):
            raise ConfigError(
                "DiT upcast_attention (float32 attention scores) is not built by mobius"
            )
        return cls(
            num_attention_heads=config.num_attention_heads,
            attention_head_dim=config.attention_head_dim,
            in_channels=config.in_channels,
            out_channels=getattr(config, "out_channels", None),
            num_layers=config.num_layers,
            attention_bias=getattr(config, "attention_bias", True),
            sample_size=config.sample_size,
            patch_size=config.patch_size,
            activation_fn=getattr(config, "activation_fn", "gelu-approximate"),
            num_embeds_ada_norm=getattr(config, "num_embeds_ada_norm", 1000),
            norm_elementwise_affine=getattr(config, "norm_elementwise_affine", False),
            norm_eps=getattr(config, "norm_eps", 1e-5),
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class LabelEmbedding(nn.Module):
    """The class table, with one extra row: the "no class" label of classifier-free guidance."""

    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.embedding_table = Embedding(num_classes + 1, dim)

    def forward(self, op, labels):
        return self.embedding_table(op, labels)


class CombinedTimestepLabelEmbeddings(nn.Module):
    """Timestep embedding (sinusoid shifted by 1) plus the class embedding -> ``[batch, dim]``."""

    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)
        self.timestep_embedder = TimestepEmbedding(256, dim)
        self.class_embedder = LabelEmbedding(num_classes, dim)

    def forward(self, op, timestep, class_labels, like):
        t_emb = self.timestep_embedder(op, self.time_proj(op, timestep, like))
        return op.Add(t_emb, self.class_embedder(op, class_labels))


class LabelAdaLayerNormZero(AdaLayerNormZero):
    """``AdaLayerNormZero`` that embeds its own conditioning from the timestep and class label."""

    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__(dim)
        self.emb = CombinedTimestepLabelEmbeddings(num_classes, dim)

    def forward(self, op, x, timestep, class_labels):
        return super().forward(op, x, self.emb(op, timestep, class_labels, x))


class DiTBlock(nn.Module):
    """diffusers' ``BasicTransformerBlock`` as DiT configures it: ``ada_norm_zero``, no cross-attention."""

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        dim = config.inner_dim
        self.norm1 = LabelAdaLayerNormZero(dim, config.num_embeds_ada_norm)
        heads, head_dim = config.num_attention_heads, config.attention_head_dim
        self.attn1 = Attention(dim, heads, head_dim, bias=config.attention_bias)
        self.norm3 = layer_norm(dim, config.norm_eps, config.norm_elementwise_affine)
        self.ff = FeedForward(dim, activation_fn=config.activation_fn)

    def forward(self, op, x, timestep, class_labels):
        normed, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.norm1(op, x, timestep, class_labels)
        x = op.Add(x, gated(op, gate_msa, self.attn1(op, normed)))
        ff = self.ff(op, modulate(op, self.norm3(op, x), shift_mlp, scale_mlp))
        return op.Add(x, gated(op, gate_mlp, ff))


class DiTTransformer2DModel(Model):
    """diffusers' ``DiTTransformer2DModel`` (facebook/DiT-XL-2-256 / 512)."""

    config_class = DiTConfig
    task = "denoising"

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        self.config = config
        dim, p = config.inner_dim, config.patch_size
        self.out_channels = config.out_channels or config.in_channels
        self.pos_embed = PatchEmbed(p, config.in_channels, dim, config.sample_size // p)
        self.transformer_blocks = nn.ModuleList(
            [DiTBlock(config) for _ in range(config.num_layers)]
        )
        self.norm_out = WeightlessLayerNorm(dim, 1e-6)
        self.proj_out_1 = Linear(dim, 2 * dim, bias=True)
        self.proj_out_2 = Linear(dim, p * p * self.out_channels, bias=True)

    def forward(self, op, hidden_states, timestep, class_labels):
        hidden, h, w = self.pos_embed(op, hidden_states)
        for block in self.transformer_blocks:
            hidden = block(op, hidden, timestep, class_labels)
        # The output layer is conditioned on the first block's embedding.
        emb = self.transformer_blocks[0].norm1.emb(op, timestep, class_labels, hidden)
        shift, scale = op.Split(
            self.proj_out_1(op, op.Mul(emb, op.Sigmoid(emb))), axis=1, num_outputs=2, _outputs=2
        )
        hidden = self.proj_out_2(op, modulate(op, self.norm_out(op, hidden), shift, scale))
        return unpatchify(op, hidden, h, w, self.config.patch_size, self.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "timestep": (None, ["batch"]),
            "class_labels": (ir.DataType.INT64, ["batch"]),
        }
        outputs = {
            "out_hidden_states": ["batch", self.out_channels, "latent_height", "latent_width"]
        }

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"DiTTransformer2DModel": DiTTransformer2DModel}
