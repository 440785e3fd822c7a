"""Aria: Idefics3's vision tower over padded crops, learned queries that cross-attend to it, an
MoE text decoder.

The vision graph takes what ``AriaImageProcessor`` gives: ``pixel_values [crops, channels,
size, size]`` (each image, or each of its crops when split, resized so its long side is
``size`` and zero-padded at the bottom and right) and ``pixel_mask`` int64 ``[crops, size,
size]`` (1 on real pixels). A patch is real when any of its pixels is; the tower runs with
the padding patches masked and its ``hidden_states[vision_feature_layer]`` (before
``post_layernorm``) are the keys and values of the projector: the first ``queries`` rows of
a learned ``query`` table attend to each crop's real patches (``torch.nn.MultiheadAttention``
after their own ``q/k/v_proj``, layer-normed), then ``layer_norm`` and a GELU MLP to the
text width. ``queries`` is ``projector_patch_to_query_dict[patches]``, the entry for the
tower's patch count: ``image_features [crops * queries, text_hidden]``.

The text decoder is mobius-text's ``aria_text`` (routed plus shared experts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, module_scope
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, layer_index
from mobius_vision.models.idefics3 import patch_mask
from mobius_vision.models.idefics3_vision import Idefics3VisionConfig, key_bias
from mobius_vision.models.siglip_vision import PoolingAttention


@dataclass
class AriaConfig(VisionLanguageConfig):
    vision_feature_layer: int = -1
    #: the learned queries each crop gets, and the rows of the ``query`` table
    queries: int = 128
    query_rows: int = 256

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        vision = fields["vision"]
        if not isinstance(vision, Idefics3VisionConfig):
            raise ConfigError(f"{vision.model_type} is not an Idefics3 vision tower")
        layer = hf_config.vision_feature_layer
        depth = vision.num_hidden_layers
        if not isinstance(layer, int) or not -depth - 1 <= layer <= depth:
            raise ConfigError(f"vision_feature_layer {layer!r} is not one of the tower's layers")
        table = hf_config.projector_patch_to_query_dict
        if not isinstance(table, dict) or not table:
            raise ConfigError(f"projector_patch_to_query_dict {table!r} is not a mapping")
        table = {int(k): int(v) for k, v in table.items()}
        patches = vision.patches_per_side**2
        if patches not in table or not all(v > 0 for v in table.values()):
            raise ConfigError(
                f"projector_patch_to_query_dict {table} has no positive entry for the tower's "
                f"{patches} patches"
            )
        return dict(
            fields,
            vision_feature_layer=layer,
            queries=table[patches],
            query_rows=max(table.values()),
        )


class AriaMultiheadAttention(PoolingAttention):
    """``torch.nn.MultiheadAttention`` over separate query, key and value inputs."""

    def forward(self, op, query, key, value, bias):
        wq, wk, wv = op.Split(self.in_proj_weight, axis=1, num_outputs=3, _outputs=3)
        bq, bk, bv = op.Split(self.in_proj_bias, axis=0, num_outputs=3, _outputs=3)
        q = op.Add(op.MatMul(query, wq), bq)
        k, v = op.Add(op.MatMul(key, wk), bk), op.Add(op.MatMul(value, wv), bv)
        y = op.Attention(q, k, v, bias, q_num_heads=self.num_heads, kv_num_heads=self.num_heads)
        return self.out_proj(op, y)


class AriaCrossAttention(nn.Module):
    def __init__(self, width: int, num_heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(width, width, bias=False)
        self.k_proj = Linear(width, width, bias=False)
        self.v_proj = Linear(width, width, bias=False)
        self.multihead_attn = AriaMultiheadAttention(width, num_heads)
        self.linear = Linear(width, width, bias=True)
        self.layer_norm = LayerNorm(width, 1e-5)
        self.layer_norm_kv = LayerNorm(width, 1e-5)

    def forward(self, op, states, queries, bias):
        query = self.q_proj(op, self.layer_norm(op, queries))
        states = self.layer_norm_kv(op, states)
        key, value = self.k_proj(op, states), self.v_proj(op, states)
        return self.linear(op, self.multihead_attn(op, query, key, value, bias))


class AriaProjectorMLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int) -> None:
        super().__init__()
        self.linear_in = Linear(in_features, hidden, bias=False)
        self.act = get_activation("gelu_new")
        self.linear_out = Linear(hidden, out_features, bias=False)

    def forward(self, op, x):
        return self.linear_out(op, self.act(op, self.linear_in(op, x)))


class AriaProjector(nn.Module):
    """``[crops, patches, width]`` tower states -> ``[crops, queries, text_hidden]``."""

    def __init__(self, config: AriaConfig) -> None:
        super().__init__()
        width, text = config.vision.hidden_size, config.text.hidden_size
        self.query = nn.Parameter([config.query_rows, width])
        self.cross_attn = AriaCrossAttention(width, config.vision.num_attention_heads)
        self.layer_norm = LayerNorm(width, 1e-5)
        self.feed_forward = AriaProjectorMLP(width, text, text)
        self.queries = config.queries

    def forward(self, op, states, real_patches):
        queries = op.Slice(self.query, [0], [self.queries], [0])  # [queries, width]
        crops = op.Shape(states, start=0, end=1)
        queries = op.Expand(queries, op.Concat(crops, [1, 1], axis=0))  # [crops, queries, width]
        bias = key_bias(op, real_patches, queries)  # padding patches are no keys
        x = self.cross_attn(op, states, queries, bias)
        return self.feed_forward(op, self.layer_norm(op, x))


class AriaForConditionalGeneration(VisionLanguageModel):
    config_class = AriaConfig

    def make_projector(self, config: AriaConfig) -> nn.Module:
        return AriaProjector(config)

    def vision_inputs(self, dtype) -> list[tuple]:
        size, channels = self.config.vision.image_size[0], self.config.vision.num_channels
        return [
            ("pixel_values", dtype, ["num_crops", channels, size, size]),
            ("pixel_mask", ir.DataType.INT64, ["num_crops", size, size]),
        ]

    @property
    def feature_layer(self) -> int:
        """The ``hidden_states`` index the projector reads, non-negative."""
        return layer_index(self.config.vision_feature_layer, self.config.vision.num_hidden_layers)

    def image_features(self, op, pixel_values, pixel_mask):
        real = patch_mask(op, pixel_mask, self.config.vision)  # [crops, grid, grid]
        with module_scope(op, self.vision_tower):  # the tower's own parameter names
            states = self.vision_tower.hidden_states(op, pixel_values, self.feature_layer, real)
        x = self.multi_modal_projector(op, states[self.feature_layer], real)
        return flatten_images(op, x)  # [crops * queries, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        depth = self.config.vision.num_hidden_layers
        unused = [f"vision_tower.encoder.layers.{i}.*" for i in range(self.feature_layer, depth)]
        return (*super().ignored, *unused, "vision_tower.post_layernorm.*")


MODEL_TYPES = {"aria": AriaForConditionalGeneration}
