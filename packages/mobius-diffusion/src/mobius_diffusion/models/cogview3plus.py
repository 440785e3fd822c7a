"""CogView3-Plus's transformer: CogView4's joint blocks without RoPE, on a 2-D sin-cos table.

What it shares with :mod:`mobius_diffusion.models.cogview4`: the patch and text
projections (``patch_embed.proj``/``text_proj``), the timestep and SDXL-style size
conditioning (``time_condition_embed``), the joint attention over [text, image] with
one set of projections and per-head weightless LayerNorms of queries and keys, the
shared feed-forward and the unpatchify. What differs:

- positions: a fixed 2-D sin-cos table (diffusers' ``pos_embed`` buffer, no weights)
  added to the image tokens, patch ``(r, c)`` at row ``r`` and column ``c`` of a
  ``pos_embed_max_size`` square table; no rotary embedding;
- ``norm1`` (``CogView3PlusAdaLayerNormZeroTextImage``) splits its twelve vectors as
  six for the image then six for the text (CogView4 alternates them), its norms are
  ``norm_x``/``norm_c``;
- the q/k norms and ``norm_out`` take eps 1e-6 (CogView4: 1e-5); ``norm_out`` is
  diffusers' ``AdaLayerNormContinuous`` (SiLU inside, as the blocks' ``norm1``).

Graph: as CogView4's (:class:`CogView4Transformer2DModel`): ``hidden_states``,
``encoder_hidden_states``, ``timestep``, ``original_size``, ``target_size``,
``crop_coords`` -> ``out_hidden_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, check_constant_size
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention
from mobius_diffusion.models._checks import config_int
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    WeightlessLayerNorm,
    _ints,
    modulate,
)
from mobius_diffusion.models.cogview4 import (
    NORM_EPS,
    CogView3CombinedTimestepSizeEmbeddings,
    CogView4PatchEmbed,
    CogView4Transformer2DModel,
    CogView4TransformerBlock,
)

#: eps of the per-head q/k LayerNorms and of ``norm_out`` (fixed in diffusers).
HEAD_NORM_EPS = 1e-6


@dataclass
class CogView3PlusConfig:
    patch_size: int = 2
    in_channels: int = 16
    out_channels: int = 16
    num_layers: int = 30
    attention_head_dim: int = 40
    num_attention_heads: int = 64
    text_embed_dim: int = 4096
    time_embed_dim: int = 512
    condition_dim: int = 256
    pos_embed_max_size: int = 128

    @classmethod
    def from_hf(cls, config: Any) -> CogView3PlusConfig:
        c = cls(
            patch_size=config_int(config, "patch_size", 2),
            in_channels=config_int(config, "in_channels", 16),
            out_channels=config_int(config, "out_channels", 16),
            num_layers=config_int(config, "num_layers", 30),
            attention_head_dim=config_int(config, "attention_head_dim", 40),
            num_attention_heads=config_int(config, "num_attention_heads", 64),
            text_embed_dim=config_int(config, "text_embed_dim", 4096),
            time_embed_dim=config_int(config, "time_embed_dim", 512),
            condition_dim=config_int(config, "condition_dim", 256),
            pos_embed_max_size=config_int(config, "pos_embed_max_size", 128),
        )
        if c.inner_dim % 4:  # half the table per axis, each half sines and cosines
            raise ConfigError(
                f"{config.model_type} num_attention_heads x attention_head_dim {c.inner_dim} "
                "must be a multiple of 4"
            )
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


def sincos_table(positions: int, dim: int) -> np.ndarray:
    """``[positions, dim]`` (sin | cos) of ``0..positions-1``: diffusers' float64 table, float32."""
    check_constant_size((positions, dim), 8, "sin-cos position table", "pos_embed_max_size")
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    angles = np.outer(np.arange(positions, dtype=np.float64), omega)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


class CogView3PlusPatchEmbed(CogView4PatchEmbed):
    """CogView4's projections, plus the sin-cos table's first ``h x w`` corner on the image."""

    def __init__(self, config: CogView3PlusConfig) -> None:
        super().__init__(config)
        # the column on the first half of each embedding, the row on the second
        self.axis_table = sincos_table(config.pos_embed_max_size, config.inner_dim // 2)

    def position_table(self, op, h, w):
        """``[1, h*w, dim]``: each patch's column and row embeddings."""
        table = op.Constant(value=ir.tensor(self.axis_table))
        zero = _ints(op, [0])
        rows, cols = op.Slice(table, zero, h), op.Slice(table, zero, w)  # [h, dim/2], [w, dim/2]
        shape = op.Concat(h, w, _ints(op, [self.axis_table.shape[1]]), axis=0)
        grid = op.Concat(
            op.Expand(op.Unsqueeze(cols, [0]), shape),
            op.Expand(op.Unsqueeze(rows, [1]), shape),
            axis=-1,
        )  # [h, w, dim]
        return op.Reshape(grid, _ints(op, [1, -1, 2 * self.axis_table.shape[1]]))

    def forward(self, op, latent, h, w, text):
        image, text = super().forward(op, latent, h, w, text)
        return op.Add(image, op.CastLike(self.position_table(op, h, w), image)), text


class CogView3PlusAdaLayerNormZeroTextImage(nn.Module):
    """Weightless LayerNorms of image (``norm_x``) and text (``norm_c``), and twelve vectors of
    the (already SiLU'd) conditioning: shift, scale, gate for attention and for the MLP, the
    image's six first."""

    def __init__(self, cond_dim: int, dim: int) -> None:
        super().__init__()
        self.linear = Linear(cond_dim, 12 * dim, bias=True)
        self.norm_x = WeightlessLayerNorm(dim, NORM_EPS)
        self.norm_c = WeightlessLayerNorm(dim, NORM_EPS)

    def forward(self, op, hidden, context, temb):
        """-> (image: normed, gate_msa, shift_mlp, scale_mlp, gate_mlp), (text: the same five)."""
        chunks = op.Split(self.linear(op, temb), axis=1, num_outputs=12, _outputs=12)
        image, text = chunks[:6], chunks[6:]
        return (
            (modulate(op, self.norm_x(op, hidden), image[0], image[1]), *image[2:]),
            (modulate(op, self.norm_c(op, context), text[0], text[1]), *text[2:]),
        )


class CogView3PlusAttention(Attention):
    """Self-attention over [text, image] with per-head weightless LayerNorms of q and k."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__(dim, heads, dim_head, bias=True)
        self.norm_q = WeightlessLayerNorm(dim_head, HEAD_NORM_EPS)
        self.norm_k = WeightlessLayerNorm(dim_head, HEAD_NORM_EPS)

    def head_norm(self, op, norm, x):
        x = norm(op, op.Reshape(x, _ints(op, [0, 0, self.heads, self.dim_head])))
        return op.Reshape(x, _ints(op, [0, 0, -1]))

    def forward(self, op, joint, rotary=None):
        q = self.head_norm(op, self.norm_q, self.to_q(op, joint))
        k = self.head_norm(op, self.norm_k, self.to_k(op, joint))
        return self.to_out[0](op, self.attend(op, q, k, self.to_v(op, joint)))


class CogView3PlusTransformerBlock(CogView4TransformerBlock):
    """CogView4's block (gated joint attention, then the shared feed-forward) with CogView3-Plus's
    ``norm1`` and attention."""

    def __init__(self, config: CogView3PlusConfig) -> None:
        super().__init__(config)
        c = config
        self.norm1 = CogView3PlusAdaLayerNormZeroTextImage(c.time_embed_dim, c.inner_dim)
        self.attn1 = CogView3PlusAttention(c.inner_dim, c.num_attention_heads, c.attention_head_dim)


class CogView3PlusTransformer2DModel(CogView4Transformer2DModel):
    """diffusers' ``CogView3PlusTransformer2DModel`` (CogView3-Plus-3B); CogView4's graph."""

    config_class = CogView3PlusConfig

    def __init__(self, config: CogView3PlusConfig) -> None:
        Model.__init__(self)  # CogView4's modules but its rotary, built here
        self.config = config
        c, dim = config, config.inner_dim
        self.patch_embed = CogView3PlusPatchEmbed(c)
        self.time_condition_embed = CogView3CombinedTimestepSizeEmbeddings(c)
        self.transformer_blocks = nn.ModuleList(
            [CogView3PlusTransformerBlock(c) for _ in range(c.num_layers)]
        )
        self.norm_out = AdaLayerNormContinuous(dim, c.time_embed_dim, eps=HEAD_NORM_EPS)
        self.proj_out = Linear(dim, c.patch_size**2 * c.out_channels, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        timestep,
        original_size,
        target_size,
        crop_coords,
    ):
        c, p = self.config, self.config.patch_size
        h, w = (op.Div(op.Shape(hidden_states, start=i, end=i + 1), _ints(op, [p])) for i in (2, 3))
        hidden, context = self.patch_embed(op, hidden_states, h, w, encoder_hidden_states)
        temb = self.time_condition_embed(
            op, timestep, original_size, target_size, crop_coords, hidden
        )
        silu_temb = op.Mul(temb, op.Sigmoid(temb))  # what every block's norm1 reads
        for block in self.transformer_blocks:
            hidden, context = block(op, hidden, context, silu_temb, None)
        hidden = self.proj_out(op, self.norm_out(op, hidden, temb))
        # [b, h*w, c*p*p] -> [b, c, h, p, w, p] -> [b, c, H, W]
        x = op.Reshape(hidden, op.Concat(_ints(op, [0]), h, w, _ints(op, [-1, p, p]), axis=0))
        x = op.Transpose(x, perm=[0, 3, 1, 4, 2, 5])
        size = _ints(op, [p])
        return op.Reshape(
            x, op.Concat(_ints(op, [0, c.out_channels]), op.Mul(h, size), op.Mul(w, size), axis=0)
        )


MODEL_TYPES = {"CogView3PlusTransformer2DModel": CogView3PlusTransformer2DModel}
