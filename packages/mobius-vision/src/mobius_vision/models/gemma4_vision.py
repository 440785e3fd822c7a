"""Gemma 4's vision tower: patches the processor cut, 2-D rotary attention, position-wise pooling.

transformers' ``Gemma4VisionModel`` takes what its image processor makes of each
image (aspect ratio kept): ``pixel_values [images, max_patches, 3 * patch^2]``, the
patches row-major with zero rows padding every image to ``max_patches``, and
``image_position_ids [images, max_patches, 2]``, each patch's ``(column, row)``,
``(-1, -1)`` on padding. The tower

- maps pixels from [0, 1] to [-1, 1], projects each patch (``patch_embedder.input_proj``)
  and adds a learned column embedding and a row embedding (zero on padding);
- runs sandwich-normed layers whose attention normalises q, k (learned scale) and v
  (none), rotates the first half of each head by the column and the second by the row
  (rotate-half within each half), uses no 1/sqrt(d) scale, and masks padding keys;
- averages each ``k x k`` block of patches (``k = pooling_kernel_size``) by position,
  scales by ``sqrt(hidden)``, optionally standardises, and keeps the pooled tokens that
  cover real patches, image by image.

``Gemma4ClippableLinear`` layers clamp their input and output to checkpointed bounds
when the config sets ``use_clipped_linears``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm, apply_rotary, get_activation, merge_heads
from mobius.errors import ConfigError
from mobius_text.models.gemma3n_text import rms_normalize
from mobius_vision.config import VisionConfig


@dataclass
class Gemma4VisionConfig(VisionConfig):
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 16
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    head_dim: int = 64
    hidden_act: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 100.0
    patch_size: int = 16
    pooling_kernel_size: int = 3
    position_embedding_size: int = 10240
    use_clipped_linears: bool = False
    standardize: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        rope = hf_config.rope_parameters or {}
        if rope.get("rope_type", "axial") != "axial":
            raise ConfigError(f"gemma4_vision: rope_type is axial, not {rope['rope_type']!r}")
        if hf_config.head_dim % 4:
            raise ConfigError(
                f"gemma4_vision: head_dim {hf_config.head_dim} is not a multiple of 4"
            )
        return dict(
            super().hf_fields(hf_config),
            hidden_size=int(hf_config.hidden_size),
            intermediate_size=int(hf_config.intermediate_size),
            num_hidden_layers=int(hf_config.num_hidden_layers),
            num_attention_heads=int(hf_config.num_attention_heads),
            num_key_value_heads=int(hf_config.num_key_value_heads),
            head_dim=int(hf_config.head_dim),
            hidden_act=hf_config.hidden_activation,
            rms_norm_eps=float(hf_config.rms_norm_eps),
            rope_theta=float(rope.get("rope_theta", 100.0)),
            patch_size=int(hf_config.patch_size),
            pooling_kernel_size=int(hf_config.pooling_kernel_size),
            position_embedding_size=int(hf_config.position_embedding_size),
            use_clipped_linears=bool(hf_config.use_clipped_linears),
            standardize=bool(hf_config.standardize),
        )

    @property
    def patch_pixels(self) -> int:
        return self.num_channels * self.patch_size**2


def _f32(value: float) -> ir.Tensor:
    return ir.tensor(np.array(value, np.float32))


class Gemma4ClippableLinear(nn.Module):
    """``linear`` (no bias), its input and output clamped to checkpointed bounds when ``clipped``."""

    def __init__(self, in_features: int, out_features: int, clipped: bool) -> None:
        super().__init__()
        self.linear = Linear(in_features, out_features)
        self.clipped = clipped
        if clipped:
            self.input_min, self.input_max = nn.Parameter([]), nn.Parameter([])
            self.output_min, self.output_max = nn.Parameter([]), nn.Parameter([])

    def forward(self, op, x):
        if not self.clipped:
            return self.linear(op, x)
        y = self.linear(op, op.Clip(x, self.input_min, self.input_max))
        return op.Clip(y, self.output_min, self.output_max)


class Gemma4VisionMLP(nn.Module):
    def __init__(self, config: Gemma4VisionConfig) -> None:
        super().__init__()
        d, i, clip = config.hidden_size, config.intermediate_size, config.use_clipped_linears
        self.gate_proj = Gemma4ClippableLinear(d, i, clip)
        self.up_proj = Gemma4ClippableLinear(d, i, clip)
        self.down_proj = Gemma4ClippableLinear(i, d, clip)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.down_proj(op, op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x)))


class Gemma4VisionAttention(nn.Module):
    """Normalised q/k/v, 2-D rotary (columns on the first half of a head, rows on the second)."""

    def __init__(self, config: Gemma4VisionConfig) -> None:
        super().__init__()
        d, hd, clip = config.hidden_size, config.head_dim, config.use_clipped_linears
        self.heads, self.kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            hd,
        )
        self.q_proj = Gemma4ClippableLinear(d, self.heads * hd, clip)
        self.k_proj = Gemma4ClippableLinear(d, self.kv_heads * hd, clip)
        self.v_proj = Gemma4ClippableLinear(d, self.kv_heads * hd, clip)
        self.o_proj = Gemma4ClippableLinear(self.heads * hd, d, clip)
        self.q_norm = RMSNorm(hd, config.rms_norm_eps)
        self.k_norm = RMSNorm(hd, config.rms_norm_eps)
        self.eps = config.rms_norm_eps

    def _heads(self, op, x, heads: int):  # [images, patches, heads, head_dim]
        return op.Reshape(x, op.Constant(value_ints=[0, 0, heads, self.head_dim]))

    def _rotate(self, op, x, rope):
        """``x [images, heads, patches, head_dim]``: each half rotated by its own axis."""
        half = self.head_dim // 2
        parts = op.Split(x, num_outputs=2, axis=-1, _outputs=2)
        rotated = [apply_rotary(op, p, c, s, half) for p, (c, s) in zip(parts, rope, strict=True)]
        return op.Concat(*rotated, axis=-1)

    def forward(self, op, x, rope, key_mask):
        def project(proj, heads, norm):
            h = self._heads(op, proj(op, x), heads)
            h = norm(op, h) if norm is not None else rms_normalize(op, h, self.eps)
            return op.Transpose(h, perm=[0, 2, 1, 3])  # [images, heads, patches, head_dim]

        q = self._rotate(op, project(self.q_proj, self.heads, self.q_norm), rope)
        k = self._rotate(op, project(self.k_proj, self.kv_heads, self.k_norm), rope)
        v = project(self.v_proj, self.kv_heads, None)
        y = op.Attention(q, k, v, key_mask, scale=1.0)
        return self.o_proj(op, merge_heads(op, y))


class Gemma4VisionEncoderLayer(nn.Module):
    """Sandwich norms around attention and the MLP."""

    def __init__(self, config: Gemma4VisionConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Gemma4VisionAttention(config)
        self.mlp = Gemma4VisionMLP(config)
        self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.pre_feedforward_layernorm = RMSNorm(d, eps)
        self.post_feedforward_layernorm = RMSNorm(d, eps)

    def forward(self, op, x, rope, key_mask):
        h = self.self_attn(op, self.input_layernorm(op, x), rope, key_mask)
        x = op.Add(x, self.post_attention_layernorm(op, h))
        h = self.mlp(op, self.pre_feedforward_layernorm(op, x))
        return op.Add(x, self.post_feedforward_layernorm(op, h))


class Gemma4VisionEncoder(nn.Module):
    def __init__(self, config: Gemma4VisionConfig) -> None:
        super().__init__()
        layers = [Gemma4VisionEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)

    def forward(self, op, x, rope, key_mask):
        for layer in self.layers:
            x = layer(op, x, rope, key_mask)
        return x


class Gemma4VisionPatchEmbedder(nn.Module):
    """Patch projection plus column and row embeddings (none on padding patches)."""

    def __init__(self, config: Gemma4VisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.input_proj = Linear(config.patch_pixels, d)
        self.position_embedding_table = nn.Parameter([2, config.position_embedding_size, d])

    def forward(self, op, pixel_values, columns, rows, padding):
        half = op.CastLike(op.Constant(value=_f32(0.5)), pixel_values)
        pixels = op.Div(op.Sub(pixel_values, half), half)  # [0, 1] to [-1, 1], exactly
        x = self.input_proj(op, op.CastLike(pixels, self.input_proj.weight))
        tables = op.Split(self.position_embedding_table, num_outputs=2, axis=0, _outputs=2)
        column_table, row_table = (op.Squeeze(t, [0]) for t in tables)
        positions = op.Add(op.Gather(column_table, columns), op.Gather(row_table, rows))
        zero = op.CastLike(op.Constant(value=_f32(0.0)), positions)
        return op.Add(x, op.Where(op.Unsqueeze(padding, [2]), zero, positions))


class Gemma4VisionTower(nn.Module):
    """``patch_embedder`` and ``encoder`` (HF ``Gemma4VisionModel``), then the pooler's math.

    :meth:`soft_tokens` returns ``[tokens, hidden]``: every image's pooled tokens over real
    patches, image by image, as transformers strips the padding.
    """

    def __init__(self, config: Gemma4VisionConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embedder = Gemma4VisionPatchEmbedder(config)
        self.encoder = Gemma4VisionEncoder(config)
        if config.standardize:
            self.std_bias = nn.Parameter([config.hidden_size])
            self.std_scale = nn.Parameter([config.hidden_size])
        quarter = config.head_dim // 4
        exponents = np.arange(quarter, dtype=np.float32) * 2 / np.float32(config.head_dim // 2)
        self.inv_freq = (1.0 / np.float32(config.rope_theta) ** exponents).astype(np.float32)

    def _rope(self, op, axis):
        """cos, sin ``[images, patches, head_dim/4]`` of one position axis."""
        inv_freq = op.Constant(value=ir.tensor(self.inv_freq))
        angles = op.Mul(op.Unsqueeze(op.Cast(axis, to=ir.DataType.FLOAT), [2]), inv_freq)
        return op.Cos(angles), op.Sin(angles)

    def _pool(self, op, x, columns, rows):
        """Average ``k x k`` blocks by patch position: ``[images, length, hidden]``, and which
        pooled tokens cover a real patch ``[images, length]``."""
        k = self.config.pooling_kernel_size
        length = op.Div(op.Shape(x, start=1, end=2), op.Constant(value_ints=[k * k]))
        kernel = op.Constant(value_int=k)
        # each patch's block, numbered row-major over the image's own grid of blocks
        width = op.Add(op.ReduceMax(columns, [1], keepdims=1), op.Constant(value_int=1))
        blocks_per_row = op.Div(width, kernel)
        block = op.Add(op.Div(columns, kernel), op.Mul(blocks_per_row, op.Div(rows, kernel)))
        slots = op.Range(
            op.Constant(value_int=0), op.Squeeze(length, [0]), op.Constant(value_int=1)
        )
        hits = op.Equal(op.Unsqueeze(block, [2]), slots)  # [images, patches, length]
        weights = op.Div(op.Cast(hits, to=ir.DataType.FLOAT), op.Constant(value=_f32(k * k)))
        pooled = op.MatMul(op.Transpose(weights, perm=[0, 2, 1]), op.Cast(x, to=ir.DataType.FLOAT))
        covered = op.Cast(
            op.ReduceMax(op.Cast(hits, to=ir.DataType.INT64), [1], keepdims=0), to=ir.DataType.BOOL
        )
        return pooled, covered

    def soft_tokens(self, op, pixel_values, image_position_ids):
        """``[tokens, hidden]`` (float32): the pooled, scaled tokens of the real patches."""
        padding = op.ReduceMin(
            op.Cast(op.Equal(image_position_ids, op.Constant(value_int=-1)), to=ir.DataType.INT64),
            [2],
            keepdims=0,
        )
        padding = op.Cast(padding, to=ir.DataType.BOOL)  # [images, patches]
        clamped = op.Max(image_position_ids, op.Constant(value_int=0))
        columns, rows = (
            op.Squeeze(axis, [2]) for axis in op.Split(clamped, num_outputs=2, axis=2, _outputs=2)
        )
        x = self.patch_embedder(op, pixel_values, columns, rows, padding)
        rope = (self._rope(op, columns), self._rope(op, rows))
        # [images, 1, patches, patches], True attends: every query sees the image's real patches
        images, patches = op.Shape(padding, start=0, end=1), op.Shape(padding, start=1, end=2)
        square = op.Concat(images, op.Constant(value_ints=[1]), patches, patches, axis=0)
        key_mask = op.Expand(op.Unsqueeze(op.Not(padding), [1, 2]), square)
        x = self.encoder(op, x, rope, key_mask)
        x = op.Where(op.Unsqueeze(padding, [2]), op.CastLike(op.Constant(value=_f32(0.0)), x), x)
        pooled, covered = self._pool(op, x, columns, rows)
        pooled = op.Mul(pooled, op.Constant(value=_f32(self.config.hidden_size**0.5)))
        if self.config.standardize:
            # in float32, as transformers does: the bias cancels large values
            bias, scale = (
                op.Cast(p, to=ir.DataType.FLOAT) for p in (self.std_bias, self.std_scale)
            )
            pooled = op.Mul(op.Sub(pooled, bias), scale)
        return op.GatherND(pooled, op.Transpose(op.NonZero(covered), perm=[1, 0]))
