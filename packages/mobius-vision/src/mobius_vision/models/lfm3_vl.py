"""LFM3-VL: a patch tower of gated 2-D convolutions and attention, a merge projector, LFM3.

The vision inputs are what the Qwen2-VL image processor returns: ``pixel_values
[patches, channels * temporal_patch_size * patch_size^2]`` (each frame's patches in
``spatial_merge_size``-block order) and ``image_grid_thw [images, 3]``. The tower embeds
each patch (``patch_embed``, a bias-free linear), RMS-norms it, then runs LFM2-style layers:

- ``conv`` layers: ``in_proj`` gives an input gate, an output gate and the conv input; the
  gated input goes through a depthwise ``k x k`` convolution over its frame's patch grid
  (zeros past the frame's edges), then the output gate and ``out_proj``. Here each patch
  gathers its ``k * k`` neighbours by index (their block-order rows), so one graph serves
  frames of any grid, all in one sequence;
- attention layers: GQA within each frame (transformers' ``cu_seqlens``), queries and keys
  RMS-normed per head, then 2-D rotary (rows, then columns, over the whole head);

each followed by the SwiGLU ``feed_forward``, both pre-normed, with residual adds. The
projector layer-norms the patches, joins each run of ``merge^2`` (one block) and projects
them (``linear_1``, activation, ``linear_2``): ``image_features [patches / merge^2,
text_hidden]``. The decoder is mobius-text's LFM3, on ordinary 1-D positions.

Checkpoints name the patch embedding ``patchifier`` and the attention norms
``q_layernorm``/``k_layernorm`` (transformers renames them on load); both layouts load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, RMSNorm, apply_rotary, get_activation
from mobius.errors import ConfigError
from mobius_text.models.lfm2 import Lfm2MLP
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._vl import VisionLanguageModel, text_decoder
from mobius_vision.models.qwen2_vl import (
    VisionRotary,
    _column,
    _Kernel,
    axial_rope_theta,
    patch_images,
    patch_layout,
    same_group,
)

INT64 = ir.DataType.INT64


@dataclass
class Lfm3VlVisionConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    layer_types: list[str]
    conv_kernel_size: int
    norm_eps: float
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    rope_theta: float

    @classmethod
    def from_hf(cls, hf: Any) -> Lfm3VlVisionConfig:
        layer_types = list(hf.layer_types)
        if set(layer_types) - {"conv", "full_attention"}:
            raise ConfigError(f"{hf.model_type}: unknown layer types {sorted(set(layer_types))}")
        kernel = hf.conv_kernel_size
        if not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
            raise ConfigError(f"{hf.model_type}: conv_kernel_size {kernel!r} is not odd")
        for name in ("patch_size", "temporal_patch_size", "spatial_merge_size"):
            if not isinstance(getattr(hf, name), int):
                raise ConfigError(f"{hf.model_type}: {name} {getattr(hf, name)!r} is not one int")
        if hf.hidden_size % hf.num_attention_heads:
            raise ConfigError(f"{hf.model_type}: hidden_size does not split into heads")
        return cls(
            model_type=hf.model_type,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            num_attention_heads=hf.num_attention_heads,
            num_key_value_heads=hf.num_key_value_heads,
            layer_types=layer_types,
            conv_kernel_size=kernel,
            norm_eps=float(hf.norm_eps),
            in_channels=hf.in_channels,
            patch_size=hf.patch_size,
            temporal_patch_size=hf.temporal_patch_size,
            spatial_merge_size=hf.spatial_merge_size,
            rope_theta=axial_rope_theta(hf),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def patch_width(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size**2


@dataclass
class Lfm3VlConfig(VisionLanguageConfig):
    projector_hidden_size: int = 4096
    projector_hidden_act: str = "gelu"
    projector_bias: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(
            model_type=hf_config.model_type,
            vision=Lfm3VlVisionConfig.from_hf(hf_config.vision_config),
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
            projector_hidden_size=int(hf_config.projector_hidden_size),
            projector_hidden_act=hf_config.projector_hidden_act,
            projector_bias=bool(hf_config.projector_bias),
        )


def block_order(op, row, col, width, merge: int):
    """A grid cell's row in its frame's block-order patch list (``[patches]`` each)."""
    m = op.Constant(value_int=merge)
    block = op.Add(op.Mul(op.Div(row, m), op.Div(width, m)), op.Div(col, m))
    inner = op.Add(op.Mul(op.Mod(row, m), m), op.Mod(col, m))
    return op.Add(op.Mul(block, op.Constant(value_int=merge * merge)), inner)


class Lfm3VlVisionAttention(nn.Module):
    """GQA within each frame; queries and keys RMS-normed per head, then rotated."""

    def __init__(self, config: Lfm3VlVisionConfig) -> None:
        super().__init__()
        d, heads, kv = config.head_dim, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = Linear(config.hidden_size, heads * d)
        self.k_proj = Linear(config.hidden_size, kv * d)
        self.v_proj = Linear(config.hidden_size, kv * d)
        self.out_proj = Linear(heads * d, config.hidden_size)
        self.q_norm = RMSNorm(d, config.norm_eps)
        self.k_norm = RMSNorm(d, config.norm_eps)
        self.head_dim, self.heads, self.kv_heads = d, heads, kv

    def heads_of(self, op, x, heads: int, norm=None):
        """``[patches, heads * d]`` -> ``[1, heads, patches, d]``, each head normed by ``norm``."""
        x = op.Reshape(x, op.Constant(value_ints=[1, -1, heads, self.head_dim]))
        if norm is not None:
            x = norm(op, x)
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, x, layout):
        cos, sin, mask = layout["cos"], layout["sin"], layout["mask"]
        d, heads, kv_heads = self.head_dim, self.heads, self.kv_heads
        q = apply_rotary(op, self.heads_of(op, self.q_proj(op, x), heads, self.q_norm), cos, sin, d)
        k = apply_rotary(
            op, self.heads_of(op, self.k_proj(op, x), kv_heads, self.k_norm), cos, sin, d
        )
        v = self.heads_of(op, self.v_proj(op, x), kv_heads)
        y = op.Attention(q, k, v, mask, scale=d**-0.5)  # [1, heads, patches, d]
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[-1, heads * d]))
        return self.out_proj(op, y)


class Lfm3VlVisionShortConv(nn.Module):
    """``out_proj(output_gate * conv(input_gate * x))``, a depthwise conv over each frame's grid."""

    def __init__(self, config: Lfm3VlVisionConfig) -> None:
        super().__init__()
        hidden, k = config.hidden_size, config.conv_kernel_size
        self.in_proj = Linear(hidden, 3 * hidden)
        self.spatial_conv = _Kernel([hidden, 1, k, k])  # read as [hidden, k * k] taps
        self.out_proj = Linear(hidden, hidden)
        self.kernel = k

    def forward(self, op, x, layout):
        input_gate, output_gate, conv_input = op.Split(
            self.in_proj(op, x), num_outputs=3, axis=-1, _outputs=3
        )
        gated = op.Mul(input_gate, conv_input)  # [patches, hidden]
        # a zero row past the end: where a neighbour falls outside its frame
        padded = op.Concat(gated, op.Mul(op.Slice(gated, [0], [1], [0]), 0.0), axis=0)
        taps = self.spatial_conv(op)  # [hidden, k * k], row-major over the kernel
        out = None
        for i, neighbour in enumerate(layout["neighbours"]):
            tap = op.Gather(taps, op.Constant(value_int=i), axis=1)  # [hidden]
            term = op.Mul(op.Gather(padded, neighbour, axis=0), tap)
            out = term if out is None else op.Add(out, term)
        return self.out_proj(op, op.Mul(output_gate, out))


class Lfm3VlVisionLayer(nn.Module):
    def __init__(self, config: Lfm3VlVisionConfig, kind: str) -> None:
        super().__init__()
        self.attends = kind != "conv"
        if self.attends:
            self.self_attn = Lfm3VlVisionAttention(config)
        else:
            self.conv = Lfm3VlVisionShortConv(config)
        self.feed_forward = Lfm2MLP(config.hidden_size, config.intermediate_size)
        self.operator_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.ffn_norm = RMSNorm(config.hidden_size, config.norm_eps)

    def forward(self, op, x, layout):
        mixer = self.self_attn if self.attends else self.conv
        x = op.Add(x, mixer(op, self.operator_norm(op, x), layout))
        return op.Add(x, self.feed_forward(op, self.ffn_norm(op, x)))


class Lfm3VlVisionTower(nn.Module):
    """``patch_embed``, ``embedding_norm`` and the layers: ``[patches, hidden]``."""

    def __init__(self, config: Lfm3VlVisionConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = Linear(config.patch_width, config.hidden_size)
        self.embedding_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.rotary = VisionRotary(config.head_dim, config.rope_theta)
        self.layers = nn.ModuleList([Lfm3VlVisionLayer(config, k) for k in config.layer_types])

    def layout(self, op, pixel_values, grid_thw) -> dict:
        """What the layers share: rotary tables, the per-frame mask, each conv tap's rows."""
        merge, k = self.config.spatial_merge_size, self.config.conv_kernel_size
        segment, row, col = patch_layout(op, pixel_values, grid_thw, merge)
        index, image = patch_images(op, pixel_values, grid_thw)
        height, width = (op.Gather(_column(op, grid_thw, i), image) for i in (1, 2))
        frame_start = op.Sub(index, block_order(op, row, col, width, merge))
        outside = op.Squeeze(op.Shape(pixel_values, start=0, end=1), [0])  # the zero row
        zero = op.Constant(value=ir.tensor(np.array(0, np.int64)))
        neighbours = []
        for dy in range(-(k // 2), k // 2 + 1):
            for dx in range(-(k // 2), k // 2 + 1):
                r = op.Add(row, op.Constant(value_int=dy))
                c = op.Add(col, op.Constant(value_int=dx))
                inside = op.And(
                    op.And(op.GreaterOrEqual(r, zero), op.Less(r, height)),
                    op.And(op.GreaterOrEqual(c, zero), op.Less(c, width)),
                )
                r, c = op.Max(r, zero), op.Max(c, zero)  # any cell: masked below
                rows = op.Add(frame_start, block_order(op, r, c, width, merge))
                neighbours.append(op.Where(inside, rows, outside))
        cos, sin = self.rotary(op, row, col)
        return dict(cos=cos, sin=sin, mask=same_group(op, segment), neighbours=neighbours)

    def forward(self, op, pixel_values, grid_thw):
        layout = self.layout(op, pixel_values, grid_thw)
        x = self.embedding_norm(op, self.patch_embed(op, pixel_values))
        for layer in self.layers:
            x = layer(op, x, layout)
        return x


class Lfm3VlMultiModalProjector(nn.Module):
    def __init__(self, config: Lfm3VlConfig) -> None:
        super().__init__()
        width = config.vision.hidden_size
        self.merged = width * config.vision.spatial_merge_size**2
        bias, hidden = config.projector_bias, config.projector_hidden_size
        self.layer_norm = LayerNorm(width, 1e-6)
        self.linear_1 = Linear(self.merged, hidden, bias=bias)
        self.act = get_activation(config.projector_hidden_act)
        self.linear_2 = Linear(hidden, config.text.hidden_size, bias=bias)

    def forward(self, op, x):
        x = op.Reshape(self.layer_norm(op, x), op.Constant(value_ints=[-1, self.merged]))
        return self.linear_2(op, self.act(op, self.linear_1(op, x)))


class Lfm3VlForConditionalGeneration(VisionLanguageModel):
    config_class = Lfm3VlConfig
    renames = {
        "model.vision_tower.patchifier.": "vision_tower.patch_embed.",
        **VisionLanguageModel.renames,
    }

    def __init__(self, config: Lfm3VlConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = Lfm3VlVisionTower(config.vision)
        self.multi_modal_projector = Lfm3VlMultiModalProjector(config)
        self.language_model = text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        return [
            ("pixel_values", dtype, ["num_patches", self.config.vision.patch_width]),
            ("image_grid_thw", INT64, ["num_images", 3]),
        ]

    def image_features(self, op, pixel_values, image_grid_thw):
        states = self.vision_tower(op, pixel_values, image_grid_thw)
        return self.multi_modal_projector(op, states)  # [image_tokens, text_hidden]

    def sanitize(self, weights: dict) -> dict:
        """The checkpoints' ``q_layernorm``/``k_layernorm`` under transformers' names."""
        renamed = {}
        for name, value in weights.items():
            if name.startswith("model.vision_tower."):
                name = name.replace(".self_attn.q_layernorm.", ".self_attn.q_norm.")
                name = name.replace(".self_attn.k_layernorm.", ".self_attn.k_norm.")
            renamed[name] = value
        return super().sanitize(renamed)


MODEL_TYPES = {"lfm3_vl": Lfm3VlForConditionalGeneration}
