"""HunyuanDiT's transformer: a DiT with a U-Net's long skips, cross-attending to CLIP + T5 text.

Each block shifts a LayerNorm of the image tokens by the conditioning
(``AdaLayerNormShift``), self-attends with LayerNormed q/k and a 2-D RoPE, cross-attends
to the text (RoPE on the queries only, as diffusers' ``HunyuanAttnProcessor2_0``), then
runs a feed-forward. The second half's blocks first fuse the output of their mirror
block in the first half (``skip_norm`` of ``[x, skip]``, then ``skip_linear``).

The text is the bilingual CLIP (BERT) states followed by the T5 states through
``text_embedder``; tokens a mask marks as padding become ``text_embedding_padding``'s
learned rows (diffusers does not mask the attention). The conditioning sums a timestep
embedding and ``extra_embedder`` of the T5 states pooled by one attention query, and,
up to HunyuanDiT 1.1 (``use_style_cond_and_image_meta_size``), the sinusoids of the
six image sizes and a style embedding.

The RoPE is computed in the graph from the latent's grid, as the pipeline makes
``image_rotary_emb``: the grid resized to fit a ``512 // 8 // patch_size`` square (sizes
rounded in float64), centred, and sampled ``linspace(top, bottom * (n-1)/n, n)`` in
float32 as torch does; the first half of each head's rotated pairs encodes the column,
the second the row. Module tree and names follow diffusers' ``HunyuanDiT2DModel``.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``timestep`` [batch], ``encoder_hidden_states`` [batch,
text_len, cross_attention_dim] and ``text_embedding_mask`` int64 [batch, text_len],
``encoder_hidden_states_t5`` [batch, text_len_t5, cross_attention_dim_t5] and
``text_embedding_mask_t5``, with style conditioning ``image_meta_size`` [batch, 6] and
``style`` int64 [batch] -> ``out_hidden_states`` [batch, out_channels, ...] (the noise and,
with ``learn_sigma``, the variance channels). diffusers' ``controlnet_block_samples`` is not
an input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._checks import config_choice, config_float, config_int
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    PatchEmbed,
    TextProjection,
    _ints,
    per_token,
    unpatchify,
)
from mobius_diffusion.models._hunyuan_embeddings import (
    POOL_HEADS,
    HunyuanCombinedTimestepTextSizeStyleEmbedding,
    HunyuanRotaryPosEmbed,
)
from mobius_diffusion.tasks import GraphSpec

#: eps of the blocks' LayerNorms and q/k norms (diffusers' defaults, not in the config).
NORM_EPS = 1e-6


def _config_bool(config: Any, name: str, default: bool) -> bool:
    value = getattr(config, name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{config.model_type} {name} must be true or false, got {value!r}")
    return value


@dataclass
class HunyuanDiTConfig:
    num_attention_heads: int = 16
    attention_head_dim: int = 88
    in_channels: int = 4
    patch_size: int = 2
    activation_fn: str = "gelu-approximate"
    num_layers: int = 28
    mlp_ratio: float = 4.0
    learn_sigma: bool = True
    cross_attention_dim: int = 1024
    cross_attention_dim_t5: int = 2048
    pooled_projection_dim: int = 1024
    text_len: int = 77
    text_len_t5: int = 256
    use_style_cond_and_image_meta_size: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> HunyuanDiTConfig:
        c = cls(
            num_attention_heads=config_int(config, "num_attention_heads", 16),
            attention_head_dim=config_int(config, "attention_head_dim", 88),
            in_channels=config_int(config, "in_channels"),
            patch_size=config_int(config, "patch_size"),
            activation_fn=config_choice(
                config, "activation_fn", "gelu-approximate", FeedForward.ACTIVATIONS
            ),
            num_layers=config_int(config, "num_layers", 28),
            mlp_ratio=config_float(config, "mlp_ratio", 4.0),
            learn_sigma=_config_bool(config, "learn_sigma", True),
            cross_attention_dim=config_int(config, "cross_attention_dim", 1024),
            cross_attention_dim_t5=config_int(config, "cross_attention_dim_t5", 2048),
            pooled_projection_dim=config_int(config, "pooled_projection_dim", 1024),
            text_len=config_int(config, "text_len", 77),
            text_len_t5=config_int(config, "text_len_t5", 256),
            use_style_cond_and_image_meta_size=_config_bool(
                config, "use_style_cond_and_image_meta_size", True
            ),
        )
        config_choice(config, "norm_type", "layer_norm", ("layer_norm",))
        name = config.model_type
        hidden_size = config_int(config, "hidden_size", 1152)
        if hidden_size != c.inner_dim:  # diffusers sizes the embeddings by one, blocks by other
            raise ConfigError(
                f"{name} hidden_size must equal num_attention_heads x attention_head_dim "
                f"({c.inner_dim}), got {hidden_size}"
            )
        if c.num_layers % 2:  # an odd count leaves a second-half block without its skip
            raise ConfigError(f"{name} num_layers {c.num_layers} must be even")
        if c.attention_head_dim % 4:  # half the rotated pairs per axis
            raise ConfigError(
                f"{name} attention_head_dim {c.attention_head_dim} must be a multiple of 4"
            )
        if c.cross_attention_dim_t5 % POOL_HEADS:
            raise ConfigError(
                f"{name} cross_attention_dim_t5 {c.cross_attention_dim_t5} must be a multiple "
                f"of the pooler's {POOL_HEADS} heads"
            )
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def out_channels(self) -> int:
        return 2 * self.in_channels if self.learn_sigma else self.in_channels


class HunyuanPatchEmbed(PatchEmbed):
    """``proj`` to tokens, no position table (diffusers' ``pos_embed_type=None``)."""

    def forward(self, op, latent):
        x = self.proj(op, latent)  # [b, dim, h, w]
        return op.Transpose(op.Reshape(x, _ints(op, [0, 0, -1])), perm=[0, 2, 1])


class HunyuanAttention(Attention):
    """Attention with LayerNormed q/k per head; RoPE on the queries, and on the keys when it
    attends to itself."""

    def __init__(self, dim: int, heads: int, cross_attention_dim: int | None = None) -> None:
        super().__init__(dim, heads, dim // heads, cross_attention_dim, bias=True)
        self.norm_q = LayerNorm(dim // heads, NORM_EPS)
        self.norm_k = LayerNorm(dim // heads, NORM_EPS)

    def normed(self, op, norm, x, rotary):
        x = norm(op, op.Reshape(x, _ints(op, [0, 0, self.heads, self.dim_head])))
        x = op.Reshape(x, _ints(op, [0, 0, -1]))
        if rotary is None:
            return x
        cos, sin = rotary
        return op.RotaryEmbedding(x, cos, sin, interleaved=1, num_heads=self.heads)

    def forward(self, op, hidden, rotary, context=None):
        q = self.normed(op, self.norm_q, self.to_q(op, hidden), rotary)
        source = hidden if context is None else context
        k = self.normed(op, self.norm_k, self.to_k(op, source), rotary if context is None else None)
        return self.to_out[0](op, self.attend(op, q, k, self.to_v(op, source)))


class AdaLayerNormShift(nn.Module):
    """``norm(x) + linear(silu(emb))``: a LayerNorm (with weights) shifted by the conditioning."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = Linear(dim, dim, bias=True)
        self.norm = LayerNorm(dim, NORM_EPS)

    def forward(self, op, x, emb):
        return op.Add(
            self.norm(op, x), per_token(op, self.linear(op, op.Mul(emb, op.Sigmoid(emb))))
        )


class HunyuanDiTBlock(nn.Module):
    def __init__(self, config: HunyuanDiTConfig, skip: bool) -> None:
        super().__init__()
        c, dim = config, config.inner_dim
        self.norm1 = AdaLayerNormShift(dim)
        self.attn1 = HunyuanAttention(dim, c.num_attention_heads)
        self.norm2 = LayerNorm(dim, NORM_EPS)
        self.attn2 = HunyuanAttention(dim, c.num_attention_heads, c.cross_attention_dim)
        self.norm3 = LayerNorm(dim, NORM_EPS)
        inner = int(dim * c.mlp_ratio)
        self.ff = FeedForward(dim, activation_fn=c.activation_fn, inner_dim=inner)
        self.skip_norm = LayerNorm(2 * dim, NORM_EPS) if skip else None
        self.skip_linear = Linear(2 * dim, dim, bias=True) if skip else None

    def forward(self, op, x, text, temb, rotary, skip=None):
        if self.skip_linear is not None:
            x = self.skip_linear(op, self.skip_norm(op, op.Concat(x, skip, axis=-1)))
        x = op.Add(x, self.attn1(op, self.norm1(op, x, temb), rotary))
        x = op.Add(x, self.attn2(op, self.norm2(op, x), rotary, text))
        return op.Add(x, self.ff(op, self.norm3(op, x)))


class HunyuanDiT2DModel(Model):
    """diffusers' ``HunyuanDiT2DModel`` (HunyuanDiT 1.0 to 1.2)."""

    config_class = HunyuanDiTConfig
    task = "denoising"

    def __init__(self, config: HunyuanDiTConfig) -> None:
        super().__init__()
        self.config = config
        c, dim = config, config.inner_dim
        self.rope = HunyuanRotaryPosEmbed(c.attention_head_dim, 512 // 8 // c.patch_size)
        t5 = c.cross_attention_dim_t5
        self.text_embedder = TextProjection(t5, 4 * t5, "silu", out_features=c.cross_attention_dim)
        self.text_embedding_padding = nn.Parameter(
            [c.text_len + c.text_len_t5, c.cross_attention_dim]
        )
        self.pos_embed = HunyuanPatchEmbed(c.patch_size, c.in_channels, dim)
        self.time_extra_emb = HunyuanCombinedTimestepTextSizeStyleEmbedding(c)
        half = c.num_layers // 2
        self.blocks = nn.ModuleList(
            [HunyuanDiTBlock(c, skip=layer > half) for layer in range(c.num_layers)]
        )
        self.norm_out = AdaLayerNormContinuous(dim, dim, eps=1e-6)
        self.proj_out = Linear(dim, c.patch_size**2 * c.out_channels, bias=True)

    def forward(self, op, hidden_states, timestep, text, text_mask, t5, t5_mask, sizes, style):
        c = self.config
        h, w = self.pos_embed.grid_size(op, hidden_states)
        x = self.pos_embed(op, hidden_states)
        temb = self.time_extra_emb(op, timestep, t5, sizes, style, x)
        text = op.Concat(text, self.text_embedder(op, t5), axis=1)
        real = op.Cast(
            op.Unsqueeze(op.Concat(text_mask, t5_mask, axis=1), [2]), to=ir.DataType.BOOL
        )
        text = op.Where(real, text, self.text_embedding_padding)
        cos, sin = self.rope(op, h, w)
        rows = op.Concat(op.Shape(x, start=0, end=1), op.Shape(cos), axis=0)
        rotary = tuple(op.Expand(op.CastLike(t, x), rows) for t in (cos, sin))
        # the first half's outputs (but the last) feed the second half's blocks, mirrored
        skips, half = [], c.num_layers // 2
        for layer, block in enumerate(self.blocks):
            x = block(op, x, text, temb, rotary, skips.pop() if layer > half else None)
            if layer < half - 1:
                skips.append(x)
        x = self.proj_out(op, self.norm_out(op, x, temb))
        return unpatchify(op, x, h, w, c.patch_size, c.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        int64 = ir.DataType.INT64
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "timestep": (None, ["batch"]),
            "encoder_hidden_states": (None, ["batch", c.text_len, c.cross_attention_dim]),
            "text_embedding_mask": (int64, ["batch", c.text_len]),
            "encoder_hidden_states_t5": (None, ["batch", c.text_len_t5, c.cross_attention_dim_t5]),
            "text_embedding_mask_t5": (int64, ["batch", c.text_len_t5]),
        }
        if c.use_style_cond_and_image_meta_size:
            inputs.update(image_meta_size=(None, ["batch", 6]), style=(int64, ["batch"]))
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **v):
            out = self(
                op,
                v["hidden_states"],
                v["timestep"],
                v["encoder_hidden_states"],
                v["text_embedding_mask"],
                v["encoder_hidden_states_t5"],
                v["text_embedding_mask_t5"],
                v.get("image_meta_size"),
                v.get("style"),
            )
            return {"out_hidden_states": out}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"HunyuanDiT2DModel": HunyuanDiT2DModel}
