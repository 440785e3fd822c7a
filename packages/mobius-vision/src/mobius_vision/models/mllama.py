"""Mllama (Llama 3.2 Vision): a tiled ViT whose states the text decoder cross-attends to.

The processor cuts each image into up to ``max_num_tiles`` tiles of ``image_size``
and gives ``aspect_ratio_ids`` (which tile layout, 0 for no image) and
``aspect_ratio_mask`` (the real tiles). The vision model embeds each tile's patches,
adds a gated per-layout tile embedding, a class token and gated position / per-layout
tile-position tables, pads each tile's tokens to a multiple of 8, and runs a local
transformer, a final norm, another gated tile embedding and a gated global
transformer over all tiles of an image. Its output is the global states with
the local transformer's ``intermediate_layers_indices`` states concatenated along
the width (``vision_output_dim``), padding dropped; ``multi_modal_projector`` maps
it to the text width.

Nothing is merged into the token embeddings: the decoder (mobius-text's
``mllama_text``) cross-attends to those states at its ``cross_attention_layers``, so
the vision graph outputs each such layer's keys and values (the contract of
:mod:`mobius_vision.tasks.cross_attention_vl`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import MLP, Embedding, LayerNorm, Linear, lowest_value
from mobius.errors import ConfigError
from mobius.model import Model
from mobius.weights import rename_prefixes
from mobius_text.models.mllama_text import (
    MllamaTextConfig,
    MllamaTextForCausalLM,
    cross_attention_bias,
)
from mobius_vision.config import VisionConfig, VisionLanguageConfig, image_size_pair
from mobius_vision.models.vit import PatchConv

INT64 = ir.DataType.INT64


@dataclass
class MllamaVisionConfig(VisionConfig):
    hidden_size: int = 1280
    intermediate_size: int = 5120
    num_hidden_layers: int = 32
    num_global_layers: int = 8
    attention_heads: int = 16
    hidden_act: str = "gelu"
    patch_size: int = 14
    norm_eps: float = 1e-5
    max_num_tiles: int = 4
    max_aspect_ratio_id: int = 8
    vision_output_dim: int = 7680
    intermediate_layers_indices: tuple[int, ...] = (3, 7, 15, 23, 30)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        size = image_size_pair(hf_config.image_size)
        if size[0] != size[1] or size[0] % hf_config.patch_size:
            raise ConfigError(f"mllama: tiles of {size} do not split into square patches")
        layers = tuple(int(i) for i in hf_config.intermediate_layers_indices)
        width = hf_config.hidden_size * (len(layers) + 1)
        if width != hf_config.vision_output_dim:
            raise ConfigError(f"mllama: vision_output_dim {hf_config.vision_output_dim} != {width}")
        return dict(
            super().hf_fields(hf_config),
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_global_layers=hf_config.num_global_layers,
            attention_heads=hf_config.attention_heads,
            hidden_act=hf_config.hidden_act,
            patch_size=int(hf_config.patch_size),
            norm_eps=hf_config.norm_eps,
            max_num_tiles=hf_config.max_num_tiles,
            max_aspect_ratio_id=len(hf_config.supported_aspect_ratios),
            vision_output_dim=hf_config.vision_output_dim,
            intermediate_layers_indices=layers,
        )

    @property
    def tokens_per_tile(self) -> int:
        """The patches of a tile plus its class token."""
        return (self.image_size[0] // self.patch_size) ** 2 + 1


@dataclass
class MllamaConfig(VisionLanguageConfig):
    """The sub-configs are Mllama's own (neither is registered on its own)."""

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(
            model_type=hf_config.model_type,
            vision=MllamaVisionConfig.from_hf(hf_config.vision_config),
            text=MllamaTextConfig.from_hf(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
        )


class MllamaVisionAttention(nn.Module):
    """Bias-free multi-head self-attention over an image's tokens, with the padding bias."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(hidden, hidden)
        self.k_proj = Linear(hidden, hidden)
        self.v_proj = Linear(hidden, hidden)
        self.o_proj = Linear(hidden, hidden)
        self.head_dim = hidden // heads

    def forward(self, op, x, bias):
        def heads(y):  # [batch, tokens, hidden] -> [batch, heads, tokens, head_dim]
            y = op.Reshape(y, op.Constant(value_ints=[0, 0, -1, self.head_dim]))
            return op.Transpose(y, perm=[0, 2, 1, 3])

        q, k, v = (heads(proj(op, x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        y = op.Attention(q, k, v, bias, scale=self.head_dim**-0.5)
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, y)


class MllamaVisionEncoderLayer(nn.Module):
    """Pre-norm block; the global transformer's scales each branch by ``tanh`` of a gate."""

    def __init__(self, config: MllamaVisionConfig, gated: bool) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = MllamaVisionAttention(d, config.attention_heads)
        self.mlp = MLP(d, config.intermediate_size, config.hidden_act)
        self.input_layernorm = LayerNorm(d, config.norm_eps)
        self.post_attention_layernorm = LayerNorm(d, config.norm_eps)
        self.gate_attn = nn.Parameter([1]) if gated else None
        self.gate_ffn = nn.Parameter([1]) if gated else None

    def forward(self, op, x, bias):
        h = self.self_attn(op, self.input_layernorm(op, x), bias)
        x = op.Add(x, h if self.gate_attn is None else op.Mul(op.Tanh(self.gate_attn), h))
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(x, h if self.gate_ffn is None else op.Mul(op.Tanh(self.gate_ffn), h))


class MllamaVisionEncoder(nn.Module):
    def __init__(self, config: MllamaVisionConfig, num_layers: int, gated: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [MllamaVisionEncoderLayer(config, gated) for _ in range(num_layers)]
        )

    def forward(self, op, x, bias):
        """Every layer's output (transformers' ``hidden_states``, without the input)."""
        states = []
        for layer in self.layers:
            x = layer(op, x, bias)
            states.append(x)
        return states


class MllamaPrecomputedAspectRatioEmbedding(nn.Module):
    """``x + tanh(gate) * embedding[aspect_ratio_id]``, one row of ``[tiles, hidden]`` per layout."""

    def __init__(self, config: MllamaVisionConfig) -> None:
        super().__init__()
        self.embedding = Embedding(
            config.max_aspect_ratio_id + 1, config.max_num_tiles * config.hidden_size
        )
        self.gate = nn.Parameter([1])
        self.shape = [0, config.max_num_tiles, 1, config.hidden_size]

    def forward(self, op, x, aspect_ratio_ids):  # x [images, tiles, tokens, hidden]
        table = self.embedding(op, aspect_ratio_ids)  # [images, tiles * hidden]
        table = op.Reshape(table, op.Constant(value_ints=self.shape))
        return op.Add(x, op.Mul(op.Tanh(self.gate), table))


class MllamaPrecomputedPositionEmbedding(nn.Module):
    """``x + (1 - tanh(gate)) * embedding + tanh(gate) * tile_embedding[aspect_ratio_id]``."""

    def __init__(self, config: MllamaVisionConfig) -> None:
        super().__init__()
        tokens, d = config.tokens_per_tile, config.hidden_size
        self.gate = nn.Parameter([1])
        self.embedding = nn.Parameter([tokens, d])
        self.tile_embedding = Embedding(
            config.max_aspect_ratio_id + 1, config.max_num_tiles * tokens * d
        )
        self.shape = [0, config.max_num_tiles, tokens, d]

    def forward(self, op, x, aspect_ratio_ids):  # x [images, tiles, tokens, hidden]
        gate = op.Tanh(self.gate)
        one = op.CastLike(op.Constant(value_float=1.0), gate)
        x = op.Add(x, op.Mul(op.Sub(one, gate), self.embedding))
        table = self.tile_embedding(op, aspect_ratio_ids)
        return op.Add(x, op.Mul(gate, op.Reshape(table, op.Constant(value_ints=self.shape))))


class MllamaVisionModel(nn.Module):
    """The tiled ViT (HF ``model.vision_model``); see the module docstring."""

    def __init__(self, config: MllamaVisionConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.patch_embedding = PatchConv(config.num_channels, d, config.patch_size, bias=False)
        self.class_embedding = nn.Parameter([d])
        self.gated_positional_embedding = MllamaPrecomputedPositionEmbedding(config)
        self.pre_tile_positional_embedding = MllamaPrecomputedAspectRatioEmbedding(config)
        self.post_tile_positional_embedding = MllamaPrecomputedAspectRatioEmbedding(config)
        self.layernorm_pre = LayerNorm(d)
        self.layernorm_post = LayerNorm(d)
        self.transformer = MllamaVisionEncoder(config, config.num_hidden_layers, gated=False)
        self.global_transformer = MllamaVisionEncoder(config, config.num_global_layers, True)

    def padding_bias(self, op, aspect_ratio_mask, padded: int, dtype):
        """``[images, 1, N, N]``: the lowest value where both tokens are padding, else 0.

        A token is padding when its tile is (``aspect_ratio_mask`` 0) or it is one of the
        tokens added to reach ``padded`` per tile. This is transformers' mask as it is:
        real tokens see padding tokens. (With no tokens added, transformers' slice
        ``[-0:]`` marks every token as padding; that is kept too.)
        """
        tokens = self.config.tokens_per_tile
        real = np.zeros(padded, np.float32)
        if padded > tokens:
            real[:tokens] = 1.0
        tiles = op.Cast(aspect_ratio_mask, to=dtype)  # [images, tiles]
        real = op.Mul(
            op.Unsqueeze(tiles, [-1]), op.CastLike(op.Constant(value=ir.tensor(real)), tiles)
        )
        one = op.CastLike(op.Constant(value_float=1.0), tiles)
        lowest = op.CastLike(op.Constant(value_float=lowest_value(dtype)), tiles)
        pad = op.Reshape(op.Sub(one, real), [0, -1, 1])  # [images, N, 1]
        both = op.MatMul(pad, op.Transpose(pad, perm=[0, 2, 1]))  # [images, N, N]
        return op.Unsqueeze(op.Mul(both, lowest), [1])

    def forward(self, op, pixel_values, aspect_ratio_ids, aspect_ratio_mask):
        """``[batch, images * tiles * tokens_per_tile, vision_output_dim]``."""
        c = self.config
        d, tiles, tokens = c.hidden_size, c.max_num_tiles, c.tokens_per_tile
        padded = math.ceil(tokens / 8) * 8
        size = c.image_size[0]
        pixels = op.Reshape(pixel_values, op.Constant(value_ints=[-1, c.num_channels, size, size]))
        x = self.patch_embedding(op, pixels)  # [images * tiles, patches, hidden]
        ratio = op.Reshape(aspect_ratio_ids, op.Constant(value_ints=[-1]))  # [images]
        x = op.Reshape(x, op.Constant(value_ints=[-1, tiles, tokens - 1, d]))
        x = self.pre_tile_positional_embedding(op, x, ratio)
        x = op.Reshape(x, op.Constant(value_ints=[-1, tokens - 1, d]))
        cls = op.Expand(
            op.Reshape(self.class_embedding, op.Constant(value_ints=[1, 1, d])),
            op.Concat(op.Shape(x, start=0, end=1), op.Constant(value_ints=[1, 1]), axis=0),
        )
        x = op.Reshape(op.Concat(cls, x, axis=1), op.Constant(value_ints=[-1, tiles, tokens, d]))
        x = self.gated_positional_embedding(op, x, ratio)
        # the norm over [images * tiles, tokens, hidden]: ORT's fused norms take 3-D inputs
        x = self.layernorm_pre(op, op.Reshape(x, op.Constant(value_ints=[-1, tokens, d])))
        x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, padded - tokens, 0]))
        mask = op.Reshape(aspect_ratio_mask, op.Constant(value_ints=[-1, tiles]))
        bias = self.padding_bias(op, mask, padded, pixel_values.dtype)
        x = op.Reshape(x, op.Constant(value_ints=[-1, tiles * padded, d]))
        states = self.transformer(op, x, bias)
        x = op.Reshape(self.layernorm_post(op, states[-1]), [0, tiles, padded, d])
        x = self.post_tile_positional_embedding(op, x, ratio)
        x = op.Reshape(x, op.Constant(value_ints=[0, tiles * padded, d]))
        x = self.global_transformer(op, x, bias)[-1]
        picked = [op.Unsqueeze(states[i], [-1]) for i in c.intermediate_layers_indices]
        inner = op.Concat(*picked, axis=-1)  # [images, N, hidden, k]: width is hidden-major
        x = op.Concat(
            op.Reshape(x, op.Constant(value_ints=[0, tiles, padded, d])),
            op.Reshape(inner, op.Constant(value_ints=[0, tiles, padded, -1])),
            axis=-1,
        )
        x = op.Slice(x, [0], [tokens], [2])  # drop the padding tokens
        width = op.Constant(value_ints=[-1, c.vision_output_dim])
        out = op.Concat(op.Shape(aspect_ratio_ids, start=0, end=1), width, axis=0)
        return op.Reshape(x, out)  # [batch, images * tiles * tokens, vision_output_dim]


class MllamaForConditionalGeneration(Model):
    """``vision_model``, ``multi_modal_projector`` and the cross-attending ``language_model``."""

    task = "cross-attention-vision-language"
    config_class = MllamaConfig

    def __init__(self, config: MllamaConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_model = MllamaVisionModel(config.vision)
        self.multi_modal_projector = Linear(
            config.vision.vision_output_dim, config.text.hidden_size, bias=True
        )
        self.language_model = MllamaTextForCausalLM(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        """The vision graph's inputs, as the processor names them: ``(name, dtype, shape)``."""
        v = self.config.vision
        size, tiles = v.image_size[0], v.max_num_tiles
        pixels = ["batch", "num_images", tiles, v.num_channels, size, size]
        return [
            ("pixel_values", dtype, pixels),
            ("aspect_ratio_ids", INT64, ["batch", "num_images"]),
            ("aspect_ratio_mask", INT64, ["batch", "num_images", tiles]),
        ]

    def decoder_inputs(self) -> list[tuple]:
        tiles = self.config.vision.max_num_tiles
        return [("cross_attention_mask", INT64, ["batch", "sequence", "num_images", tiles])]

    def cache_shape(self) -> tuple[int, int]:
        """``(kv_heads, head_dim)`` of every self- and cross-attention cache."""
        return self.config.text.num_key_value_heads, self.config.text.head_dim

    def self_attention_layers(self) -> list[int]:
        return self.language_model.self_attention_layers()

    def cross_attention_layers(self) -> list[int]:
        return list(self.config.text.cross_attention_layers)

    def cross_cache(self, op, pixel_values, aspect_ratio_ids, aspect_ratio_mask) -> dict:
        """Per cross-attention layer, its ``(key, value)`` ``[batch, kv_heads, vision_tokens, head_dim]``."""
        states = self.vision_model(op, pixel_values, aspect_ratio_ids, aspect_ratio_mask)
        states = self.multi_modal_projector(op, states)  # [batch, vision_tokens, text_hidden]
        return self.language_model.cross_cache(op, states)

    def decode(self, op, input_ids, attention_mask, position_ids, past, cross_mask, cross):
        """Logits and the self-attention cache (``past``/``cross`` keyed by layer index)."""
        dtype = next(iter(cross.values()))[0].dtype
        tokens = self.config.vision.tokens_per_tile
        bias, row_mask = cross_attention_bias(op, cross_mask, tokens, dtype)
        return self.language_model(
            op, input_ids, attention_mask, position_ids, past, bias, row_mask, cross
        )

    #: transformers 5's checkpoint key prefixes to module paths (the older layout of the hub's
    #: checkpoints, ``vision_model.``, ``language_model.model.``..., is the module tree already).
    renames: ClassVar[dict[str, str]] = {
        "model.vision_model.": "vision_model.",
        "model.multi_modal_projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def sanitize(self, weights: dict) -> dict:
        return rename_prefixes(weights, self.renames)


MODEL_TYPES = {"mllama": MllamaForConditionalGeneration}
