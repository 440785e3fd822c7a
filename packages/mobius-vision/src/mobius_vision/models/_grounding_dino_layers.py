"""Grounding DINO's transformer layers: the encoder's image-text fusion, text enhancer and
deformable layer, and the decoder's layer (self-attention, text cross-attention,
deformable cross-attention).

Module names follow the checkpoint (``model.encoder.layers.0.fusion_layer.attn.vision_proj``,
``model.decoder.layers.0.encoder_attn_text.query``...). Masks, as the layers take them:

- ``pixel_padding`` bool ``[batch, pixels]``: true on the padding of the flattened levels;
- ``pixel_mask`` float ``[batch, pixels]``: 1 on the image, 0 on its padding;
- ``text_padding`` bool ``[batch, tokens]``: true on padded tokens;
- ``text_bias`` / ``phrase_bias``: additive attention biases (0 or the lowest float).
"""

from __future__ import annotations

import numpy as np
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius_vision.models._conv import activation
from mobius_vision.models._deformable import MultiscaleDeformableAttention
from mobius_vision.models._detr import float_constant

#: transformers clamps the fusion's attention scores to this range (for float16's sake).
FUSION_CLAMP = 50000.0


class GroundingDinoMultiheadAttention(nn.Module):
    """``query``/``key``/``value``/``out_proj`` attention (``nn.MultiheadAttention``'s maths)."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.query = Linear(hidden_size, hidden_size, bias=True)
        self.key = Linear(hidden_size, hidden_size, bias=True)
        self.value = Linear(hidden_size, hidden_size, bias=True)
        self.out_proj = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads = num_heads
        self.scale = (hidden_size // num_heads) ** -0.5

    def forward(self, op, queries, keys, values, bias=None):
        q, k, v = self.query(op, queries), self.key(op, keys), self.value(op, values)
        heads = self.num_heads
        out = op.Attention(q, k, v, bias, q_num_heads=heads, kv_num_heads=heads, scale=self.scale)
        return self.out_proj(op, out)


def split_heads(op, x, num_heads: int):
    """``[batch, seq, heads * d]`` -> ``[batch, heads, seq, d]``."""
    return op.Transpose(
        op.Reshape(x, op.Constant(value_ints=[0, 0, num_heads, -1])), perm=[0, 2, 1, 3]
    )


def merge_heads(op, x):
    """``[batch, heads, seq, d]`` -> ``[batch, seq, heads * d]``."""
    return op.Reshape(op.Transpose(x, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))


def masked_softmax(op, scores, padding):
    """Softmax over the last axis with the keys where ``padding`` (broadcast) is true at -inf."""
    minus_inf = float_constant(op, -np.inf, scores)
    return op.Softmax(op.Where(padding, minus_inf, scores), axis=-1)


class GroundingDinoBiMultiHeadAttention(nn.Module):
    """Pixels attend to the tokens and tokens to the pixels through one score matrix."""

    def __init__(self, d_model: int, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.vision_proj = Linear(d_model, embed_dim, bias=True)
        self.text_proj = Linear(d_model, embed_dim, bias=True)
        self.values_vision_proj = Linear(d_model, embed_dim, bias=True)
        self.values_text_proj = Linear(d_model, embed_dim, bias=True)
        self.out_vision_proj = Linear(embed_dim, d_model, bias=True)
        self.out_text_proj = Linear(embed_dim, d_model, bias=True)
        self.num_heads = num_heads
        self.scale = (embed_dim // num_heads) ** -0.5

    def forward(self, op, vision, text, pixel_padding, text_padding):
        """``(vision delta [batch, pixels, d], text delta [batch, tokens, d])``."""
        heads = self.num_heads
        queries = op.Mul(self.vision_proj(op, vision), float_constant(op, self.scale, vision))
        queries = split_heads(op, queries, heads)
        keys = split_heads(op, self.text_proj(op, text), heads)
        vision_values = split_heads(op, self.values_vision_proj(op, vision), heads)
        text_values = split_heads(op, self.values_text_proj(op, text), heads)
        low, high = (
            float_constant(op, -FUSION_CLAMP, vision),
            float_constant(op, FUSION_CLAMP, vision),
        )
        scores = op.MatMul(queries, op.Transpose(keys, perm=[0, 1, 3, 2]))  # [b, h, pixels, tokens]
        # transformers subtracts the maximum of the whole batch before clamping
        scores = op.Clip(op.Sub(scores, op.ReduceMax(scores, keepdims=1)), low, high)
        transposed = op.Transpose(scores, perm=[0, 1, 3, 2])  # [b, h, tokens, pixels]
        row_max = op.ReduceMax(transposed, op.Constant(value_ints=[-1]), keepdims=1)
        text_scores = op.Clip(op.Sub(transposed, row_max), low, high)
        text_weights = masked_softmax(op, text_scores, op.Unsqueeze(pixel_padding, [1, 2]))
        vision_weights = masked_softmax(op, scores, op.Unsqueeze(text_padding, [1, 2]))
        vision_out = merge_heads(op, op.MatMul(vision_weights, text_values))
        text_out = merge_heads(op, op.MatMul(text_weights, vision_values))
        return self.out_vision_proj(op, vision_out), self.out_text_proj(op, text_out)


class GroundingDinoFusionLayer(nn.Module):
    """Both streams normed, then each plus its learned scale times what the other told it."""

    def __init__(self, d_model: int, ffn_dim: int, num_heads: int, eps: float) -> None:
        super().__init__()
        self.layer_norm_vision = LayerNorm(d_model, eps)
        self.layer_norm_text = LayerNorm(d_model, eps)
        self.attn = GroundingDinoBiMultiHeadAttention(d_model, ffn_dim // 2, num_heads // 2)
        self.vision_param = nn.Parameter([d_model])
        self.text_param = nn.Parameter([d_model])

    def forward(self, op, vision, text, pixel_padding, text_padding):
        vision = self.layer_norm_vision(op, vision)
        text = self.layer_norm_text(op, text)
        delta_vision, delta_text = self.attn(op, vision, text, pixel_padding, text_padding)
        vision = op.Add(vision, op.Mul(self.vision_param, delta_vision))
        return vision, op.Add(text, op.Mul(self.text_param, delta_text))


class GroundingDinoTextEnhancerLayer(nn.Module):
    """Self-attention among each phrase's tokens (positions on queries and keys), then a
    feed-forward of half the encoder's width; each post-normed."""

    def __init__(self, d_model: int, ffn_dim: int, num_heads: int, act: str, eps: float) -> None:
        super().__init__()
        self.self_attn = GroundingDinoMultiheadAttention(d_model, num_heads // 2)
        self.fc1 = Linear(d_model, ffn_dim // 2, bias=True)
        self.fc2 = Linear(ffn_dim // 2, d_model, bias=True)
        self.layer_norm_before = LayerNorm(d_model, eps)
        self.layer_norm_after = LayerNorm(d_model, eps)
        self.act = activation(act)

    def forward(self, op, text, phrase_bias, text_positions):
        queries = op.Add(text, text_positions)
        attended = self.self_attn(op, queries, queries, text, phrase_bias)
        text = self.layer_norm_before(op, op.Add(text, attended))
        update = self.fc2(op, self.act(op, self.fc1(op, text)))
        return self.layer_norm_after(op, op.Add(text, update))


class PostNormFeedForward(nn.Module):
    """``final_layer_norm(x + fc2(act(fc1(x))))`` on the layer itself (``layers.N.fc1``)."""

    def __init__(self, d_model: int, ffn_dim: int, act: str, eps: float) -> None:
        super().__init__()
        self.fc1 = Linear(d_model, ffn_dim, bias=True)
        self.fc2 = Linear(ffn_dim, d_model, bias=True)
        self.final_layer_norm = LayerNorm(d_model, eps)
        self.act = activation(act)

    def feed_forward(self, op, x):
        return self.final_layer_norm(op, op.Add(x, self.fc2(op, self.act(op, self.fc1(op, x)))))


class GroundingDinoDeformableLayer(PostNormFeedForward):
    """Deformable self-attention over the levels' pixels, then the feed-forward."""

    def __init__(self, config) -> None:
        d = config.d_model
        super().__init__(
            d, config.encoder_ffn_dim, config.activation_function, config.layer_norm_eps
        )
        self.self_attn = MultiscaleDeformableAttention(
            d, config.encoder_attention_heads, config.num_feature_levels, config.encoder_n_points
        )
        self.self_attn_layer_norm = LayerNorm(d, config.layer_norm_eps)

    def forward(self, op, vision, positions, reference_points, level_shapes, pixel_mask):
        attended = self.self_attn(
            op, vision, vision, reference_points, level_shapes, pixel_mask, positions
        )
        return self.feed_forward(op, self.self_attn_layer_norm(op, op.Add(vision, attended)))


class GroundingDinoEncoderLayer(nn.Module):
    """Fusion of the two streams, then the text enhancer and the deformable layer."""

    def __init__(self, config) -> None:
        super().__init__()
        d, ffn, heads = config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads
        act, eps = config.activation_function, config.layer_norm_eps
        self.text_enhancer_layer = GroundingDinoTextEnhancerLayer(d, ffn, heads, act, eps)
        self.fusion_layer = GroundingDinoFusionLayer(d, ffn, heads, eps)
        self.deformable_layer = GroundingDinoDeformableLayer(config)

    def forward(self, op, vision, text, streams):
        """``(vision, text)`` after the layer; ``streams`` holds the masks and positions."""
        vision, text = self.fusion_layer(
            op, vision, text, streams.pixel_padding, streams.text_padding
        )
        text = self.text_enhancer_layer(op, text, streams.phrase_bias, streams.text_positions)
        vision = self.deformable_layer(
            op,
            vision,
            streams.pixel_positions,
            streams.reference_points,
            streams.level_shapes,
            streams.pixel_mask,
        )
        return vision, text


class GroundingDinoDecoderLayer(PostNormFeedForward):
    """Self-attention over the queries, attention to the tokens, deformable attention around
    the queries' boxes, feed-forward; each post-normed."""

    def __init__(self, config) -> None:
        d, eps = config.d_model, config.layer_norm_eps
        super().__init__(d, config.decoder_ffn_dim, config.activation_function, eps)
        heads = config.decoder_attention_heads
        self.self_attn = GroundingDinoMultiheadAttention(d, heads)
        self.self_attn_layer_norm = LayerNorm(d, eps)
        self.encoder_attn_text = GroundingDinoMultiheadAttention(d, heads)
        self.encoder_attn_text_layer_norm = LayerNorm(d, eps)
        self.encoder_attn = MultiscaleDeformableAttention(
            d, heads, config.num_feature_levels, config.decoder_n_points, box_references=True
        )
        self.encoder_attn_layer_norm = LayerNorm(d, eps)

    def forward(self, op, hidden, positions, memory, text, text_bias, references, streams):
        queries = op.Add(hidden, positions)
        attended = self.self_attn(op, queries, queries, hidden)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        attended = self.encoder_attn_text(op, op.Add(hidden, positions), text, text, text_bias)
        hidden = self.encoder_attn_text_layer_norm(op, op.Add(hidden, attended))
        attended = self.encoder_attn(
            op, hidden, memory, references, streams.level_shapes, streams.pixel_mask, positions
        )
        hidden = self.encoder_attn_layer_norm(op, op.Add(hidden, attended))
        return self.feed_forward(op, hidden)
