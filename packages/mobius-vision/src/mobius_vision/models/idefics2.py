"""Idefics2: Idefics3's tower over images of any size, a gated MLP and a perceiver resampler,
over Mistral.

The vision graph takes what ``Idefics2Processor`` gives: ``pixel_values`` float
``[batch, images, channels, height, width]`` (each image resized within
``[shortest_edge, longest_edge]``, zero-padded to the batch's largest height and width,
prompts padded with all-zero images to the most images a prompt holds) and
``pixel_attention_mask`` int64 ``[batch, images, height, width]``. As transformers does,
the all-zero images are dropped; a patch is real when all its pixels are; the tower
(Idefics3's, its position buckets counted over each image's own real patch grid) masks
the padding patches as keys. The connector maps each patch to the decoder's width
(``modality_projection``, a gated MLP) and the perceiver resampler reads them, padding
masked, into ``resampler_n_latents`` tokens per image: each layer's latents attend (GQA)
over the patches followed by the latents themselves.

Checkpoints name the parts ``model.vision_model``, ``model.connector``, ``model.text_model``
and ``lm_head`` (Idefics3's layout).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._vl import flatten_images, text_decoder
from mobius_vision.models.idefics3 import Idefics3ForConditionalGeneration
from mobius_vision.models.idefics3_vision import (
    _BELOW_ONE,
    Idefics3VisionConfig,
    Idefics3VisionEmbeddings,
    Idefics3VisionTransformer,
    torch_arange_boundaries,
)

INT64 = ir.DataType.INT64


@dataclass
class PerceiverConfig:
    hidden_size: int
    hidden_act: str
    rms_norm_eps: float
    n_latents: int
    depth: int
    n_heads: int
    head_dim: int
    num_key_value_heads: int

    @classmethod
    def from_hf(cls, hf: Any) -> PerceiverConfig:
        heads, kv_heads = int(hf.resampler_n_heads), int(hf.num_key_value_heads)
        if heads % kv_heads:
            raise ConfigError(f"resampler_n_heads {heads} is not a multiple of {kv_heads} kv heads")
        return cls(
            hidden_size=int(hf.hidden_size),
            hidden_act=hf.hidden_act,
            rms_norm_eps=float(hf.rms_norm_eps),
            n_latents=int(hf.resampler_n_latents),
            depth=int(hf.resampler_depth),
            n_heads=heads,
            head_dim=int(hf.resampler_head_dim),
            num_key_value_heads=kv_heads,
        )


@dataclass
class Idefics2Config(VisionLanguageConfig):
    perceiver: PerceiverConfig | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # idefics2_vision is no standalone type of the registry: Idefics3's reads its fields
        vision = Idefics3VisionConfig.from_hf(hf_config.vision_config)
        perceiver = PerceiverConfig.from_hf(hf_config.perceiver_config)
        text = composed_config(cls.text_hf_config(hf_config))
        if perceiver.hidden_size != text.hidden_size:
            raise ConfigError(
                f"perceiver hidden_size {perceiver.hidden_size} is not the decoder's {text.hidden_size}"
            )
        tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=dataclasses.replace(text, tie_word_embeddings=tied),
            image_token_id=int(hf_config.image_token_id),
            perceiver=perceiver,
        )


class Idefics2VisionEmbeddings(Idefics3VisionEmbeddings):
    """Idefics3's embeddings over a patch grid of any size (at most the table's side)."""

    def position_ids(self, op, patch_mask):
        """``[images, rows * columns]`` int64: each real patch's bucket, 0 for padding patches."""
        boundaries = op.Constant(value=ir.tensor(torch_arange_boundaries(self.side)))

        def buckets(axis_size, real):  # bucketize(index / real, boundaries, right=True)
            index = op.Cast(
                op.Range(op.Constant(value_int=0), axis_size, op.Constant(value_int=1)),
                to=ir.DataType.FLOAT,
            )
            step = op.Div(op.Constant(value_float=1.0), op.Cast(real, to=ir.DataType.FLOAT))
            coords = op.Min(
                op.Mul(index, op.Unsqueeze(step, [1])), op.Constant(value=ir.tensor(_BELOW_ONE))
            )
            below = op.LessOrEqual(boundaries, op.Unsqueeze(coords, [2]))
            return op.ReduceSum(op.Cast(below, to=INT64), [2], keepdims=0)  # [images, n]

        def count(axis):  # [images]: the real patch rows (axis 2) or columns (axis 1)
            line = op.Gather(patch_mask, op.Constant(value_int=0), axis=axis)
            return op.ReduceSum(op.Cast(line, to=INT64), [1], keepdims=0)

        rows = op.Squeeze(op.Shape(patch_mask, start=1, end=2), [0])
        columns = op.Squeeze(op.Shape(patch_mask, start=2, end=3), [0])
        h, w = buckets(rows, count(2)), buckets(columns, count(1))
        width = op.Constant(value=ir.tensor(np.array(self.side, np.int64)))
        ids = op.Add(op.Mul(op.Unsqueeze(h, [2]), width), op.Unsqueeze(w, [1]))
        flat = op.Constant(value_ints=[0, -1])
        zero = op.Constant(value=ir.tensor(np.array(0, np.int64)))
        return op.Where(op.Reshape(patch_mask, flat), op.Reshape(ids, flat), zero)


class Idefics2VisionTransformer(Idefics3VisionTransformer):
    def __init__(self, config: Idefics3VisionConfig) -> None:
        super().__init__(config)
        self.embeddings = Idefics2VisionEmbeddings(config)


class Idefics2MLP(nn.Module):
    """``down(act(gate(x)) * up(x))`` with an output width of its own."""

    def __init__(self, hidden: int, intermediate: int, output: int, act: str) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias=False)
        self.up_proj = Linear(hidden, intermediate, bias=False)
        self.down_proj = Linear(intermediate, output, bias=False)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.down_proj(op, op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x)))


class PerceiverAttention(nn.Module):
    """The latents' queries over the keys and values of ``[context, latents]`` (GQA)."""

    def __init__(self, config: PerceiverConfig) -> None:
        super().__init__()
        h, d, kv = config.hidden_size, config.head_dim, config.num_key_value_heads
        self.q_proj = Linear(h, config.n_heads * d, bias=False)
        self.k_proj = Linear(h, kv * d, bias=False)
        self.v_proj = Linear(h, kv * d, bias=False)
        self.o_proj = Linear(config.n_heads * d, h, bias=False)
        self.heads, self.kv_heads, self.head_dim = config.n_heads, kv, d

    def forward(self, op, latents, context, mask):
        def heads(x, count):  # [n, length, count * d] -> [n, count, length, d]
            x = op.Reshape(x, op.Constant(value_ints=[0, 0, count, self.head_dim]))
            return op.Transpose(x, perm=[0, 2, 1, 3])

        both = op.Concat(context, latents, axis=1)
        q = heads(self.q_proj(op, latents), self.heads)
        k = heads(self.k_proj(op, both), self.kv_heads)
        v = heads(self.v_proj(op, both), self.kv_heads)
        y = op.Attention(q, k, v, mask, scale=self.head_dim**-0.5)  # [n, heads, latents, d]
        y = op.Reshape(
            op.Transpose(y, perm=[0, 2, 1, 3]),
            op.Constant(value_ints=[0, 0, self.heads * self.head_dim]),
        )
        return self.o_proj(op, y)


class PerceiverLayer(nn.Module):
    def __init__(self, config: PerceiverConfig) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.input_latents_norm = RMSNorm(h, eps)
        self.input_context_norm = RMSNorm(h, eps)
        self.self_attn = PerceiverAttention(config)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = Idefics2MLP(h, 4 * h, h, config.hidden_act)

    def forward(self, op, latents, context, mask):
        h = self.self_attn(
            op, self.input_latents_norm(op, latents), self.input_context_norm(op, context), mask
        )
        latents = op.Add(latents, h)
        return op.Add(latents, self.mlp(op, self.post_attention_layernorm(op, latents)))


class PerceiverResampler(nn.Module):
    """``latents`` through ``depth`` layers over the context, then ``norm``."""

    def __init__(self, config: PerceiverConfig) -> None:
        super().__init__()
        self.latents = nn.Parameter([config.n_latents, config.hidden_size])
        self.layers = nn.ModuleList([PerceiverLayer(config) for _ in range(config.depth)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.n_latents = config.n_latents

    def forward(self, op, context, patch_mask):
        """``context [n, patches, h]``, ``patch_mask`` bool ``[n, patches]`` -> ``[n, latents, h]``."""
        count = op.Shape(context, start=0, end=1)
        latents = op.Expand(op.Unsqueeze(self.latents, [0]), op.Concat(count, [1, 1], axis=0))
        every_latent = op.Expand(
            op.Constant(value=ir.tensor(np.array(True))),
            op.Concat(count, [self.n_latents], axis=0),
        )
        keys = op.Concat(patch_mask, every_latent, axis=1)
        # [n, 1, latents, patches + latents], True attends (ORT wants the query axis whole)
        mask = op.Expand(
            op.Unsqueeze(keys, [1, 2]), op.Constant(value_ints=[1, 1, self.n_latents, 1])
        )
        for layer in self.layers:
            latents = layer(op, latents, context, mask)
        return self.norm(op, latents)


class Idefics2Connector(nn.Module):
    def __init__(self, config: Idefics2Config) -> None:
        super().__init__()
        text = config.text
        self.modality_projection = Idefics2MLP(
            config.vision.hidden_size, text.intermediate_size, text.hidden_size, text.hidden_act
        )
        self.perceiver_resampler = PerceiverResampler(config.perceiver)

    def forward(self, op, states, patch_mask):
        return self.perceiver_resampler(op, self.modality_projection(op, states), patch_mask)


class Idefics2ForConditionalGeneration(Idefics3ForConditionalGeneration):
    """Idefics3's layout and padding-image drop; the tower over images of any size, the
    perceiver connector, a patch real only when all its pixels are."""

    config_class = Idefics2Config

    def __init__(self, config: Idefics2Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = Idefics2VisionTransformer(config.vision)
        self.multi_modal_projector = Idefics2Connector(config)
        self.language_model = text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        channels = self.config.vision.num_channels
        return [
            ("pixel_values", dtype, ["batch", "num_images", channels, "height", "width"]),
            ("pixel_attention_mask", INT64, ["batch", "num_images", "height", "width"]),
        ]

    def patch_mask(self, op, pixel_mask):
        """``[images, height/p, width/p]`` bool: a patch is real when all its pixels are."""
        p = self.config.vision.patch_size
        patch = op.Constant(value=ir.tensor(np.array([p], np.int64)))
        grid = op.Div(op.Shape(pixel_mask, start=1, end=3), patch)  # [rows, columns]
        m = op.Slice(pixel_mask, op.Constant(value_ints=[0, 0]), op.Mul(grid, patch), [1, 2])
        rows, columns = op.Split(grid, num_outputs=2, axis=0, _outputs=2)
        shape = op.Concat([0], rows, patch, columns, patch, axis=0)
        real = op.ReduceSum(op.Reshape(m, shape), [2, 4], keepdims=0)
        return op.Equal(real, op.Constant(value=ir.tensor(np.array(p * p, np.int64))))

    def image_features(self, op, pixel_values, pixel_attention_mask):
        images = op.Reshape(
            pixel_values, op.Concat([-1], op.Shape(pixel_values, start=2), axis=0)
        )  # [images, c, h, w]
        masks = op.Reshape(
            pixel_attention_mask, op.Concat([-1], op.Shape(pixel_attention_mask, start=2), axis=0)
        )
        real = self.real_tiles(op, images)
        images, masks = op.Compress(images, real, axis=0), op.Compress(masks, real, axis=0)
        patch_mask = self.patch_mask(op, masks)
        states = self.vision_tower(op, images, patch_mask)  # [images, patches, d]
        flat_mask = op.Reshape(patch_mask, op.Constant(value_ints=[0, -1]))
        return flatten_images(op, self.multi_modal_projector(op, states, flat_mask))


MODEL_TYPES = {"idefics2": Idefics2ForConditionalGeneration}
