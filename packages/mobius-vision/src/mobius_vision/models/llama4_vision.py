"""Llama 4's vision tower (HF ``llama4_vision_model``): fixed-size tiles in, adapter features out.

Each tile ``[channels, image_size, image_size]`` is cut into ``patch_size`` squares,
flattened channel-major (``torch.nn.Unfold``'s order) and projected by the bias-free
``patch_embedding.linear``. A class embedding is appended *after* the patches, the
learned ``positional_embedding_vlm`` added, then ``layernorm_pre``, pre-LayerNorm
layers (biased attention, GELU MLP) and ``layernorm_post``. The attention rotates
interleaved channel pairs by each patch's ``column + 1`` (first quarter of the head's
frequencies) and ``row + 1`` (second quarter); the class token is not rotated. The
class token is dropped, each ``1/ratio``-square of patches is folded into one token by
transformers' ``pixel_shuffle`` and the ``vision_adapter`` MLP (GELU after both linears)
ends the tower: ``[tiles, tokens, projector_output_dim]``.

Every tile has the same grid, so the rotary tables are constants of the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import MLP, LayerNorm, Linear, apply_rotary, get_activation, merge_heads
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._common import VisionTowerModel

_EPS = 1e-5  # transformers builds every LayerNorm of the tower with torch's default


@dataclass
class Llama4VisionConfig(VisionConfig):
    hidden_size: int = 1408
    intermediate_size: int = 5632
    num_hidden_layers: int = 34
    num_attention_heads: int = 16
    patch_size: int = 14
    pixel_shuffle_ratio: float = 0.5
    projector_input_dim: int = 4096
    projector_output_dim: int = 4096
    vision_output_dim: int = 4096
    rope_theta: float = 10000.0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        patch = hf_config.patch_size
        height, width = fields["image_size"]
        if not isinstance(patch, int) or height != width or height % patch:
            raise ConfigError(
                f"patch_size {patch!r}, image_size {hf_config.image_size!r}: Llama 4's tower "
                "takes square tiles cut into whole square patches"
            )
        rope = hf_config.rope_parameters or {}
        if rope.get("rope_type", "default") != "default":
            raise ConfigError(f"Llama 4's vision rope_type is default, not {rope['rope_type']!r}")
        fields = dict(
            fields,
            hidden_size=int(hf_config.hidden_size),
            intermediate_size=int(hf_config.intermediate_size),
            num_hidden_layers=int(hf_config.num_hidden_layers),
            num_attention_heads=int(hf_config.num_attention_heads),
            patch_size=patch,
            pixel_shuffle_ratio=float(hf_config.pixel_shuffle_ratio),
            projector_input_dim=int(hf_config.projector_input_dim),
            projector_output_dim=int(hf_config.projector_output_dim),
            vision_output_dim=int(hf_config.vision_output_dim),
            rope_theta=float(rope.get("rope_theta", 10000.0)),
        )
        cls._check_shuffle(fields)
        return fields

    @staticmethod
    def _check_shuffle(fields: dict[str, Any]) -> None:
        side = fields["image_size"][0] // fields["patch_size"]
        ratio, hidden = fields["pixel_shuffle_ratio"], fields["hidden_size"]
        folded = hidden / ratio**2
        if side * ratio != int(side * ratio) or folded != fields["intermediate_size"]:
            raise ConfigError(
                f"pixel_shuffle_ratio {ratio}: a {side}-patch grid of width {hidden} does not fold "
                f"into the adapter's {fields['intermediate_size']} inputs"
            )
        if fields["projector_input_dim"] != fields["projector_output_dim"]:
            raise ConfigError("the vision adapter's fc2 needs projector_input_dim == output_dim")

    @property
    def patches_per_side(self) -> int:
        return self.image_size[0] // self.patch_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def vision_rotary_tables(config: Llama4VisionConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin ``[patches + 1, head_dim/2]`` float32: each patch's angles, the class token's zero."""
    side, half = config.patches_per_side, config.head_dim // 2
    # a quarter of the head's frequencies per axis: theta ** -(2i / (head_dim / 2))
    exponents = np.arange(0, half, 2, dtype=np.float32)[: half // 2] / np.float32(half)
    inv_freq = (1.0 / (np.float32(config.rope_theta) ** exponents)).astype(np.float32)
    cells = np.arange(side * side)
    columns = (cells % side + 1).astype(np.float32)[:, None]
    rows = (cells // side + 1).astype(np.float32)[:, None]
    angles = np.concatenate([columns * inv_freq, rows * inv_freq], axis=1)
    angles = np.concatenate([angles, np.zeros((1, angles.shape[1]), np.float32)])  # class token
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class Llama4VisionAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(hidden_size, hidden_size, bias=True)
        self.k_proj = Linear(hidden_size, hidden_size, bias=True)
        self.v_proj = Linear(hidden_size, hidden_size, bias=True)
        self.o_proj = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads

    def forward(self, op, x, cos, sin):
        shape = op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim])

        def heads(proj):  # [tiles, heads, tokens, head_dim]
            return op.Transpose(op.Reshape(proj(op, x), shape), perm=[0, 2, 1, 3])

        q = apply_rotary(op, heads(self.q_proj), cos, sin, self.head_dim, interleaved=True)
        k = apply_rotary(op, heads(self.k_proj), cos, sin, self.head_dim, interleaved=True)
        y = op.Attention(q, k, heads(self.v_proj), scale=self.head_dim**-0.5)
        return self.o_proj(op, merge_heads(op, y))


class Llama4VisionEncoderLayer(nn.Module):
    """Pre-norm: ``x + self_attn(input_layernorm(x))``, ``x + mlp(post_attention_layernorm(x))``."""

    def __init__(self, config: Llama4VisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.input_layernorm = LayerNorm(d, _EPS)
        self.self_attn = Llama4VisionAttention(d, config.num_attention_heads)
        self.post_attention_layernorm = LayerNorm(d, _EPS)
        self.mlp = MLP(d, config.intermediate_size, "gelu")  # nn.GELU(), fixed

    def forward(self, op, x, cos, sin):
        x = op.Add(x, self.self_attn(op, self.input_layernorm(op, x), cos, sin))
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))


class Llama4VisionEncoder(nn.Module):
    def __init__(self, config: Llama4VisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [Llama4VisionEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, op, x, cos, sin):
        for layer in self.layers:
            x = layer(op, x, cos, sin)
        return x


class Llama4UnfoldConvolution(nn.Module):
    """``torch.nn.Unfold`` patches (channel, row, column within a patch) through ``linear``."""

    def __init__(self, config: Llama4VisionConfig) -> None:
        super().__init__()
        c, p = config.num_channels, config.patch_size
        self.linear = Linear(c * p * p, config.hidden_size, bias=False)
        self.channels, self.patch, self.side = c, p, config.patches_per_side

    def forward(self, op, pixel_values):
        c, p, g = self.channels, self.patch, self.side
        x = op.Reshape(pixel_values, op.Constant(value_ints=[-1, c, g, p, g, p]))
        x = op.Transpose(x, perm=[0, 2, 4, 1, 3, 5])  # [tiles, row, column, c, p, p]
        x = op.Reshape(x, op.Constant(value_ints=[0, g * g, c * p * p]))
        return self.linear(op, x)


class Llama4VisionMLP2(nn.Module):
    """``gelu(fc2(gelu(fc1(x))))``, bias-free: the adapter after the pixel shuffle."""

    def __init__(self, config: Llama4VisionConfig) -> None:
        super().__init__()
        out = config.projector_output_dim
        self.fc1 = Linear(config.intermediate_size, config.projector_input_dim, bias=False)
        self.fc2 = Linear(out, out, bias=False)
        self.act = get_activation("gelu")  # transformers fixes nn.GELU(), whatever hidden_act says

    def forward(self, op, x):
        return self.act(op, self.fc2(op, self.act(op, self.fc1(op, x))))


class Llama4VisionPixelShuffleMLP(nn.Module):
    """transformers' ``pixel_shuffle`` (two fold-and-transpose steps), then the adapter MLP."""

    def __init__(self, config: Llama4VisionConfig) -> None:
        super().__init__()
        self.mlp = Llama4VisionMLP2(config)
        self.side, self.hidden = config.patches_per_side, config.hidden_size
        self.ratio = config.pixel_shuffle_ratio

    def forward(self, op, x):
        g, d, r = self.side, self.hidden, self.ratio
        folded_side, width = int(g * r), int(d / r)
        x = op.Reshape(x, op.Constant(value_ints=[0, g, folded_side, width]))
        x = op.Transpose(x, perm=[0, 2, 1, 3])  # [tiles, g*r, g, d/r]
        x = op.Reshape(x, op.Constant(value_ints=[0, folded_side, folded_side, int(d / r**2)]))
        x = op.Transpose(x, perm=[0, 2, 1, 3])
        x = op.Reshape(x, op.Constant(value_ints=[0, folded_side * folded_side, int(d / r**2)]))
        return self.mlp(op, x)


class Llama4VisionTower(nn.Module):
    """``pixel_values [tiles, channels, size, size]`` -> ``[tiles, tokens, projector_output_dim]``."""

    def __init__(self, config: Llama4VisionConfig) -> None:
        super().__init__()
        d, g = config.hidden_size, config.patches_per_side
        self.patch_embedding = Llama4UnfoldConvolution(config)
        self.class_embedding = nn.Parameter([d])
        self.positional_embedding_vlm = nn.Parameter([g * g + 1, d])
        self.layernorm_pre = LayerNorm(d, _EPS)
        self.layernorm_post = LayerNorm(d, _EPS)
        self.model = Llama4VisionEncoder(config)
        self.vision_adapter = Llama4VisionPixelShuffleMLP(config)
        self.cos, self.sin = vision_rotary_tables(config)
        self.hidden_size = d

    def forward(self, op, pixel_values):
        x = self.patch_embedding(op, pixel_values)  # [tiles, patches, hidden]
        class_shape = op.Concat(op.Shape(x, start=0, end=1), [1, self.hidden_size], axis=0)
        x = op.Concat(x, op.Expand(self.class_embedding, class_shape), axis=1)  # class token last
        x = self.layernorm_pre(op, op.Add(x, self.positional_embedding_vlm))
        # one rotary table for every tile: [tiles, tokens, head_dim/2]
        table_shape = op.Concat(op.Shape(x, start=0, end=2), [self.cos.shape[1]], axis=0)
        cos = op.Expand(op.Constant(value=ir.tensor(self.cos)), table_shape)
        sin = op.Expand(op.Constant(value=ir.tensor(self.sin)), table_shape)
        x = self.layernorm_post(op, self.model(op, x, cos, sin))
        patches = op.Slice(x, [0], [-1], [1])  # the class token dropped
        return self.vision_adapter(op, patches)


class Llama4VisionModel(VisionTowerModel):
    """The bare tower as a build (HF ``Llama4VisionModel``): ``last_hidden_state``, the adapter's."""

    config_class = Llama4VisionConfig
    tower_class = Llama4VisionTower

    def output_shapes(self) -> dict[str, list]:
        tokens = int(self.config.patches_per_side * self.config.pixel_shuffle_ratio) ** 2
        return {"last_hidden_state": ["batch", tokens, self.config.projector_output_dim]}

    def forward(self, op, pixel_values):
        return {"last_hidden_state": self.vision_model(op, pixel_values)}


MODEL_TYPES = {"llama4_vision_model": Llama4VisionModel}
