"""Cosmos3 Edge: a packed SigLIP 2 tower, a patch-merging projector, and an M-RoPE ReLU² Llama.

The vision inputs are what ``Cosmos3EdgeImageProcessor`` returns: ``pixel_values
[patches, patch * patch * channels]`` (each patch's pixels row-major with the channels
last; each image's patches merge block by merge block) and ``image_grid_thw [images, 3]``.
The tower (``model.visual``) is SigLIP 2's: ``patch_embedding`` (a Linear), plus its
square learned position table resized to each image's patch grid (transformers'
antialiased bilinear, computed here from the grid so that one graph serves every size),
LayerNorm encoder layers attending within each image frame, ``post_layernorm``. The
projector (``model.projector``) LayerNorms each patch, concatenates each run of
``merge^2`` patches (a merge block), then ``linear_fc1``, GELU, ``linear_fc2``. The
decoder is mobius-text's ``cosmos3_edge_text`` over ``position_ids [3, batch, sequence]``
(the model's ``get_rope_index``, Qwen2-VL's).

Hub checkpoints keep the decoder flat (``layers.*``, ``embed_tokens.*``, ``norm.*``, with
Diffusers' attention names ``to_q``... and ``mlp.up_proj`` / ``mlp.down_proj`` for
``fc1`` / ``fc2``), as transformers' conversion mapping (and its ``save_pretrained``) has
them; a build maps them to the nested tree. The unified Cosmos3 checkpoints also carry
the Generator's tensors (action and time embedders, the ``*_moe_gen`` expert, cross-modal
projections); the model ignores them by the patterns transformers drops on load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_text.models.cosmos3_edge_text import Cosmos3EdgeTextConfig, Cosmos3EdgeTextForCausalLM
from mobius_vision.models.clip_vision import CLIPEncoder, PositionTable
from mobius_vision.models.cosmos3_omni import ATTENTION_NAMES
from mobius_vision.models.qwen2_vl import (
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    _column,
    patch_images,
    patch_layout,
    same_group,
)

FLOAT = ir.DataType.FLOAT

#: The hub's flat decoder names, and the nested tree's.
FLAT_NAMES = {**ATTENTION_NAMES, ".mlp.up_proj.": ".mlp.fc1.", ".mlp.down_proj.": ".mlp.fc2."}

#: The Generator's tensors of a unified checkpoint (transformers'
#: ``_COSMOS3_EDGE_DROPPED_GENERATOR_KEYS``), after the renames.
GENERATOR_TENSORS = (
    "*action_modality_embed",
    "*action_proj_in.*",
    "*action_proj_out.*",
    "*time_embedder.*",
    "language_model.model.proj_in.*",
    "language_model.model.proj_out.*",
    "*moe_gen*",
    "*.add_q_proj.*",
    "*.add_k_proj.*",
    "*.add_v_proj.*",
    "*.to_add_out.*",
    "*.norm_added_q.*",
    "*.norm_added_k.*",
    "*.k_norm_und_for_gen.*",
)


@dataclass
class Cosmos3EdgeVisionConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    patch_size: int
    hidden_act: str
    layer_norm_eps: float
    num_patches: int
    spatial_merge_size: int

    @classmethod
    def from_hf(cls, hf: Any) -> Cosmos3EdgeVisionConfig:
        sizes = (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_channels",
            "patch_size",
            "num_patches",
            "spatial_merge_size",
        )
        for name in sizes:
            value = getattr(hf, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{hf.model_type}: {name} {value!r} is not a positive int")
        if math.isqrt(hf.num_patches) ** 2 != hf.num_patches:
            raise ConfigError(
                f"{hf.model_type}: num_patches {hf.num_patches} is not a square (the position "
                "table is sqrt(num_patches) on a side)"
            )
        if hf.hidden_size % hf.num_attention_heads:
            raise ConfigError(
                f"{hf.model_type}: num_attention_heads {hf.num_attention_heads} does not "
                f"divide hidden_size {hf.hidden_size}"
            )
        return cls(
            model_type=hf.model_type,
            hidden_act=hf.hidden_act,
            layer_norm_eps=float(hf.layer_norm_eps),
            **{name: getattr(hf, name) for name in sizes},
        )

    @property
    def side(self) -> int:
        """The position table's side."""
        return math.isqrt(self.num_patches)

    @property
    def patch_width(self) -> int:
        return self.num_channels * self.patch_size**2


def antialias_bilinear_weights(op, index, size, side: int):
    """``[patches, side]``: each patch's weights over a ``side``-long table axis resized to
    ``size`` cells and read at cell ``index`` (torch's bilinear ``interpolate`` with
    ``antialias=True``, ``align_corners=False``: a triangle filter as wide as the scale)."""
    index, size = op.Cast(index, to=FLOAT), op.Cast(size, to=FLOAT)
    scale = op.Div(op.Constant(value_float=float(side)), size)  # [patches]
    support = op.Max(scale, op.Constant(value_float=1.0))
    half = op.Constant(value_float=0.5)
    center = op.Sub(op.Mul(op.Add(index, half), scale), half)
    source = op.Constant(value=ir.tensor(np.arange(side, dtype=np.float32)))
    distance = op.Abs(op.Sub(source, op.Unsqueeze(center, [1])))  # [patches, side]
    one = op.Constant(value_float=1.0)
    weights = op.Relu(op.Sub(one, op.Div(distance, op.Unsqueeze(support, [1]))))
    return op.Div(weights, op.ReduceSum(weights, [1], keepdims=1))


class Cosmos3EdgeVisionEmbeddings(nn.Module):
    """``patch_embedding`` of each patch row plus the position table resized to its image."""

    def __init__(self, config: Cosmos3EdgeVisionConfig) -> None:
        super().__init__()
        self.patch_embedding = Linear(config.patch_width, config.hidden_size, bias=True)
        self.position_embedding = PositionTable(config.num_patches, config.hidden_size)
        self.side = config.side

    def forward(self, op, pixel_values, grid_thw, row, col):
        _, image = patch_images(op, pixel_values, grid_thw)
        rows = op.Gather(_column(op, grid_thw, 1), image)  # each patch's image grid
        columns = op.Gather(_column(op, grid_thw, 2), image)
        by_row = antialias_bilinear_weights(op, row, rows, self.side)
        by_column = antialias_bilinear_weights(op, col, columns, self.side)
        weights = op.Mul(op.Unsqueeze(by_row, [2]), op.Unsqueeze(by_column, [1]))
        weights = op.Reshape(weights, op.Constant(value_ints=[0, self.side * self.side]))
        table = self.position_embedding(op)  # [side * side, hidden]
        positions = op.MatMul(op.CastLike(weights, table), table)  # [patches, hidden]
        return op.Add(self.patch_embedding(op, pixel_values), positions)


class Cosmos3EdgeVisionTower(nn.Module):
    """HF ``Cosmos3EdgeVisionModel``: ``[patches, hidden]`` in the processor's order."""

    def __init__(self, config: Cosmos3EdgeVisionConfig) -> None:
        super().__init__()
        self.merge = config.spatial_merge_size
        self.embeddings = Cosmos3EdgeVisionEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, pixel_values, grid_thw):
        segment, row, col = patch_layout(op, pixel_values, grid_thw, self.merge)
        x = self.embeddings(op, pixel_values, grid_thw, row, col)
        x = op.Unsqueeze(x, [0])  # one packed sequence [1, patches, hidden]
        zero = op.CastLike(op.Constant(value_float=0.0), x)
        apart = op.CastLike(op.Constant(value_float=float(np.finfo(np.float32).min) / 2), x)
        bias = op.Where(same_group(op, segment), zero, apart)  # within each image frame
        x = self.encoder(op, x, bias)[-1]
        return op.Squeeze(self.post_layernorm(op, x), [0])


class Cosmos3EdgePatchMerger(nn.Module):
    """``norm`` per patch, each ``merge^2`` run concatenated, ``linear_fc1``, GELU,
    ``linear_fc2`` to the decoder's width."""

    def __init__(self, vision: Cosmos3EdgeVisionConfig, hidden: int, out: int) -> None:
        super().__init__()
        self.width = vision.hidden_size * vision.spatial_merge_size**2
        self.norm = LayerNorm(vision.hidden_size, 1e-6)
        self.linear_fc1 = Linear(self.width, hidden, bias=True)
        self.act = get_activation("gelu")
        self.linear_fc2 = Linear(hidden, out, bias=True)

    def forward(self, op, x):
        x = op.Reshape(self.norm(op, x), op.Constant(value_ints=[-1, self.width]))
        return self.linear_fc2(op, self.act(op, self.linear_fc1(op, x)))


@dataclass
class Cosmos3EdgeConfig(Qwen2VLConfig):
    vision_config_class = Cosmos3EdgeVisionConfig
    text_config_class = Cosmos3EdgeTextConfig
    projector_hidden_size: int = 11520

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        hidden = hf_config.projector_hidden_size
        if not isinstance(hidden, int) or hidden < 1:
            raise ConfigError(
                f"{hf_config.model_type}: projector_hidden_size {hidden!r} is not a positive int"
            )
        return dict(super().hf_fields(hf_config), projector_hidden_size=hidden)

    @classmethod
    def text_hf_config(cls, hf_config: Any) -> Any:
        text = super().text_hf_config(hf_config)
        text.tie_word_embeddings = False  # transformers' class ties no weight, whatever it says
        return text


class Cosmos3EdgeForConditionalGeneration(Qwen2VLForConditionalGeneration):
    """``vision_tower`` (``visual``), ``multi_modal_projector`` (``projector``) and the
    M-RoPE ReLU² Llama ``language_model``."""

    config_class = Cosmos3EdgeConfig
    tower_class = Cosmos3EdgeVisionTower
    decoder_class = Cosmos3EdgeTextForCausalLM
    renames = {
        "model.visual.": "vision_tower.",
        "model.projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
        **{p: f"language_model.model.{p}" for p in ("layers.", "embed_tokens.", "norm.")},
    }

    def __init__(self, config: Cosmos3EdgeConfig) -> None:
        super().__init__(config)
        self.multi_modal_projector = Cosmos3EdgePatchMerger(
            config.vision, config.projector_hidden_size, config.text.hidden_size
        )

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, self.multi_modal_projector]

    def image_features(self, op, pixel_values, image_grid_thw):
        patches = self.vision_tower(op, pixel_values, image_grid_thw)  # [patches, hidden]
        return self.multi_modal_projector(op, patches)  # [image_tokens, text_hidden]

    def sanitize(self, weights: dict) -> dict:
        return super().sanitize({_nested_name(k): v for k, v in weights.items()})

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, *GENERATOR_TENSORS)


def _nested_name(name: str) -> str:
    for old, new in FLAT_NAMES.items():
        name = name.replace(old, new)
    return name


MODEL_TYPES = {"cosmos3_edge": Cosmos3EdgeForConditionalGeneration}
