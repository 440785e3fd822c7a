"""CogView4's transformer: joint text + image blocks with one set of projections for both.

Each block modulates text and image separately (``CogView4AdaLayerNormZero``: twelve
vectors from one ``linear`` of the conditioning), then attends over [text, image]
with the same ``to_q``/``to_k``/``to_v`` for both (per-head weightless LayerNorms of
queries and keys, a 2-axis RoPE on the image tokens only), and runs the same
feed-forward on both. The conditioning sums a timestep embedding (a sinusoid as wide
as the model) and SDXL-style size conditioning (``original_size``, ``crop_coords``,
``target_size``); the blocks read its SiLU.

The RoPE is computed in the graph as diffusers' ``CogView4RotaryPosEmbed`` makes it:
patch row ``r`` of ``h`` sits at ``r * rope_axes_dim[0] // h`` (columns alike), the
first half of the rotated channels encodes the row, the second the column, and the
pairs are the two halves of each head (``rotate_half``). Module tree and names follow
diffusers' ``CogView4Transformer2DModel`` checkpoints.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``encoder_hidden_states`` [batch, sequence,
text_embed_dim], ``timestep`` [batch] (the scheduler's ``t``, in [0, 1000], as the
pipeline passes it), ``original_size``, ``target_size``, ``crop_coords`` [batch, 2]
(pixels) -> ``out_hidden_states`` [batch, out_channels, latent_height, latent_width].
diffusers' optional ``attention_mask`` (which the pipeline does not pass: it pads the
prompt with pad tokens it attends to) and precomputed ``image_rotary_emb`` are not
inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    TextProjection,
    WeightlessLayerNorm,
    _ints,
    gated,
    modulate,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.tasks import GraphSpec

#: diffusers' eps of every LayerNorm of the model (fixed, not in the config).
NORM_EPS = 1e-5
ROPE_THETA = 10000.0


@dataclass
class CogView4Config:
    patch_size: int = 2
    in_channels: int = 16
    out_channels: int = 16
    num_layers: int = 30
    attention_head_dim: int = 40
    num_attention_heads: int = 64
    text_embed_dim: int = 4096
    time_embed_dim: int = 512
    condition_dim: int = 256
    rope_axes_dim: tuple[int, int] = (256, 256)

    @classmethod
    def from_hf(cls, config: Any) -> CogView4Config:
        head_dim = config_int(config, "attention_head_dim", 40)
        if head_dim % 4:  # half the channels per axis, rotated in pairs
            raise ConfigError(
                f"{config.model_type} attention_head_dim {head_dim} must be a multiple of 4"
            )
        return cls(
            patch_size=config_int(config, "patch_size", 2),
            in_channels=config_int(config, "in_channels", 16),
            out_channels=config_int(config, "out_channels", 16),
            num_layers=config_int(config, "num_layers", 30),
            attention_head_dim=head_dim,
            num_attention_heads=config_int(config, "num_attention_heads", 64),
            text_embed_dim=config_int(config, "text_embed_dim", 4096),
            time_embed_dim=config_int(config, "time_embed_dim", 512),
            condition_dim=config_int(config, "condition_dim", 256),
            rope_axes_dim=config_ints(config, "rope_axes_dim", (256, 256), count=2),
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class CogView4PatchEmbed(nn.Module):
    """``proj`` of each patch (channels, then its rows and columns) and ``text_proj`` of the text."""

    def __init__(self, config: CogView4Config) -> None:
        super().__init__()
        c = config
        self.patch_size, self.in_channels = c.patch_size, c.in_channels
        self.proj = Linear(c.in_channels * c.patch_size**2, c.inner_dim, bias=True)
        self.text_proj = Linear(c.text_embed_dim, c.inner_dim, bias=True)

    def forward(self, op, latent, h, w, text):
        p = _ints(op, [self.patch_size])
        x = op.Reshape(latent, op.Concat(_ints(op, [0, self.in_channels]), h, p, w, p, axis=0))
        x = op.Transpose(x, perm=[0, 2, 4, 1, 3, 5])  # [b, h, w, c, p, p]
        x = op.Reshape(x, _ints(op, [0, -1, self.in_channels * self.patch_size**2]))
        return self.proj(op, x), self.text_proj(op, text)


class CogView3CombinedTimestepSizeEmbeddings(nn.Module):
    """Timestep embedding plus the embedded (original size, crop corner, target size)."""

    def __init__(self, config: CogView4Config) -> None:
        super().__init__()
        c = config
        self.time_proj = Timesteps(c.inner_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.condition_proj = Timesteps(
            c.condition_dim, flip_sin_to_cos=True, downscale_freq_shift=0
        )
        self.timestep_embedder = TimestepEmbedding(c.inner_dim, c.time_embed_dim)
        self.condition_embedder = TextProjection(6 * c.condition_dim, c.time_embed_dim, "silu")

    def forward(self, op, timestep, original_size, target_size, crop_coords, like):
        def sizes(values):  # [b, 2] -> [b, 2 * condition_dim]: each number's sinusoid
            flat = self.condition_proj(op, op.Reshape(values, _ints(op, [-1])), like)
            return op.Reshape(flat, op.Concat(op.Shape(values, start=0, end=1), [-1], axis=0))

        condition = op.Concat(sizes(original_size), sizes(crop_coords), sizes(target_size), axis=1)
        t_emb = self.timestep_embedder(op, self.time_proj(op, timestep, like))
        return op.Add(t_emb, self.condition_embedder(op, condition))


class CogView4AdaLayerNormZero(nn.Module):
    """Weightless LayerNorms of image (``norm``) and text (``norm_context``), and twelve vectors
    (image and text alternating: shift, scale, gate for attention, then for the MLP)."""

    def __init__(self, cond_dim: int, dim: int) -> None:
        super().__init__()
        self.norm = WeightlessLayerNorm(dim, NORM_EPS)
        self.norm_context = WeightlessLayerNorm(dim, NORM_EPS)
        self.linear = Linear(cond_dim, 12 * dim, bias=True)

    def forward(self, op, hidden, context, temb):
        """-> (image: normed, gate_msa, shift_mlp, scale_mlp, gate_mlp), (text: the same five)."""
        chunks = op.Split(self.linear(op, temb), axis=1, num_outputs=12, _outputs=12)
        image, text = chunks[0::2], chunks[1::2]  # shift_msa, scale_msa, gate_msa, shift_mlp...
        return (
            (modulate(op, self.norm(op, hidden), image[0], image[1]), *image[2:]),
            (modulate(op, self.norm_context(op, context), text[0], text[1]), *text[2:]),
        )


class CogView4Attention(Attention):
    """Self-attention over [text, image]: per-head weightless LayerNorms of q and k, then the
    image tokens' rotation (``rotary``: (cos, sin) ``[batch, tokens, head_dim/2]``, identity
    rows for the text)."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__(dim, heads, dim_head, bias=True)
        self.head_norm = WeightlessLayerNorm(dim_head, NORM_EPS)

    def normed_rotated(self, op, x, rotary):
        split = op.Reshape(x, _ints(op, [0, 0, self.heads, self.dim_head]))
        x = op.Reshape(self.head_norm(op, split), _ints(op, [0, 0, -1]))
        cos, sin = rotary
        return op.RotaryEmbedding(x, cos, sin, interleaved=0, num_heads=self.heads)

    def forward(self, op, joint, rotary):
        q = self.normed_rotated(op, self.to_q(op, joint), rotary)
        k = self.normed_rotated(op, self.to_k(op, joint), rotary)
        return self.to_out[0](op, self.attend(op, q, k, self.to_v(op, joint)))


class CogView4TransformerBlock(nn.Module):
    """Modulated joint attention, then the shared feed-forward, each gated, on text and image."""

    def __init__(self, config: CogView4Config) -> None:
        super().__init__()
        c, dim = config, config.inner_dim
        self.norm1 = CogView4AdaLayerNormZero(c.time_embed_dim, dim)
        self.attn1 = CogView4Attention(dim, c.num_attention_heads, c.attention_head_dim)
        self.norm2 = WeightlessLayerNorm(dim, NORM_EPS)
        self.norm2_context = WeightlessLayerNorm(dim, NORM_EPS)
        self.ff = FeedForward(dim, dim, activation_fn="gelu-approximate")

    def forward(self, op, hidden, context, temb, rotary):
        image, text = self.norm1(op, hidden, context, temb)
        attn = self.attn1(op, op.Concat(text[0], image[0], axis=1), rotary)
        text_len = op.Shape(context, start=1, end=2)
        text_attn, image_attn = op.Split(
            attn,
            op.Concat(text_len, op.Sub(op.Shape(attn, start=1, end=2), text_len), axis=0),
            axis=1,
            _outputs=2,
        )
        outputs = []
        for x, attn_out, (_, gate_msa, shift_mlp, scale_mlp, gate_mlp), norm in (
            (hidden, image_attn, image, self.norm2),
            (context, text_attn, text, self.norm2_context),
        ):
            x = op.Add(x, gated(op, gate_msa, attn_out))
            ff = self.ff(op, modulate(op, norm(op, x), shift_mlp, scale_mlp))
            outputs.append(op.Add(x, gated(op, gate_mlp, ff)))
        return tuple(outputs)


class CogView4AdaLayerNormContinuous(nn.Module):
    """``norm(x) * (1 + scale) + shift``, ``(scale, shift)`` a ``linear`` of the conditioning
    with no activation before it (the model passes its SiLU already)."""

    def __init__(self, dim: int, cond_dim: int) -> None:
        super().__init__()
        self.linear = Linear(cond_dim, 2 * dim, bias=True)
        self.norm = WeightlessLayerNorm(dim, NORM_EPS)

    def forward(self, op, x, temb):
        scale, shift = op.Split(self.linear(op, temb), axis=1, num_outputs=2, _outputs=2)
        return modulate(op, self.norm(op, x), shift, scale)


class CogView4RotaryPosEmbed(nn.Module):
    """``(cos, sin)`` ``[h*w, head_dim/2]`` of a patch grid: rows on the first half of the
    frequencies, columns on the second (diffusers duplicates the table for ``rotate_half``)."""

    def __init__(self, head_dim: int, rope_axes_dim: tuple[int, int]) -> None:
        super().__init__()
        half = head_dim // 2
        # float32 throughout, as diffusers computes them
        exponents = np.arange(0, half, 2, dtype=np.float32)[: half // 2] / np.float32(half)
        self.inv_freq = (1.0 / np.float32(ROPE_THETA) ** exponents).astype(np.float32)
        self.rope_axes_dim = rope_axes_dim

    def axis_angles(self, op, n, table_len: int):
        """``[n, head_dim/4]``: index ``i * table_len // n`` of each of ``n`` positions, times the
        frequencies."""
        zero, one = op.Constant(value_int=0), op.Constant(value_int=1)
        index = op.Div(op.Mul(op.Range(zero, op.Squeeze(n), one), _ints(op, [table_len])), n)
        freqs = op.Constant(value=ir.tensor(self.inv_freq))
        return op.Mul(op.Unsqueeze(op.Cast(index, to=ir.DataType.FLOAT), [1]), freqs)

    def forward(self, op, h, w):
        quarter = len(self.inv_freq)
        shape = op.Concat(h, w, _ints(op, [quarter]), axis=0)
        rows = op.Expand(op.Unsqueeze(self.axis_angles(op, h, self.rope_axes_dim[0]), [1]), shape)
        cols = op.Expand(op.Unsqueeze(self.axis_angles(op, w, self.rope_axes_dim[1]), [0]), shape)
        angles = op.Reshape(op.Concat(rows, cols, axis=-1), _ints(op, [-1, 2 * quarter]))
        return op.Cos(angles), op.Sin(angles)


class CogView4Transformer2DModel(Model):
    """diffusers' ``CogView4Transformer2DModel`` (CogView4-6B)."""

    config_class = CogView4Config
    task = "denoising"

    def __init__(self, config: CogView4Config) -> None:
        super().__init__()
        self.config = config
        c, dim = config, config.inner_dim
        self.rope = CogView4RotaryPosEmbed(c.attention_head_dim, c.rope_axes_dim)
        self.patch_embed = CogView4PatchEmbed(c)
        self.time_condition_embed = CogView3CombinedTimestepSizeEmbeddings(c)
        self.transformer_blocks = nn.ModuleList(
            [CogView4TransformerBlock(c) for _ in range(c.num_layers)]
        )
        self.norm_out = CogView4AdaLayerNormContinuous(dim, c.time_embed_dim)
        self.proj_out = Linear(dim, c.patch_size**2 * c.out_channels, bias=True)

    def joint_rotary(self, op, h, w, text, like):
        """The image grid's (cos, sin) after identity rows (cos 1, sin 0) for the text tokens,
        one copy per batch row: ``[batch, sequence + h*w, head_dim/2]``."""
        cos, sin = self.rope(op, h, w)
        text_rows = op.Concat(op.Shape(text, start=1, end=2), op.Shape(cos, start=1), axis=0)
        zeros = op.Expand(op.Constant(value_float=0.0), text_rows)
        tables = (
            op.Concat(op.Add(zeros, 1.0), cos, axis=0),
            op.Concat(zeros, sin, axis=0),
        )
        rows = op.Concat(op.Shape(text, start=0, end=1), op.Shape(tables[0]), axis=0)
        return tuple(op.Expand(op.CastLike(t, like), rows) for t in tables)

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
        temb = op.Mul(temb, op.Sigmoid(temb))
        rotary = self.joint_rotary(op, h, w, context, hidden)
        for block in self.transformer_blocks:
            hidden, context = block(op, hidden, context, temb, rotary)
        hidden = self.proj_out(op, self.norm_out(op, hidden, temb))
        # [b, h*w, c*p*p] -> [b, c, h, p, w, p] -> [b, c, H, W]
        x = op.Reshape(hidden, op.Concat(_ints(op, [0]), h, w, _ints(op, [-1, p, p]), axis=0))
        x = op.Transpose(x, perm=[0, 3, 1, 4, 2, 5])
        size = _ints(op, [p])
        return op.Reshape(
            x, op.Concat(_ints(op, [0, c.out_channels]), op.Mul(h, size), op.Mul(w, size), axis=0)
        )

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.text_embed_dim]),
            "timestep": (None, ["batch"]),
            "original_size": (None, ["batch", 2]),
            "target_size": (None, ["batch", 2]),
            "crop_coords": (None, ["batch", 2]),
        }
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"CogView4Transformer2DModel": CogView4Transformer2DModel}
