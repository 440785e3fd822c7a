"""The text decoder of Mllama (Llama 3.2 Vision): Llama with gated cross-attention layers.

The layers at ``cross_attention_layers`` replace self-attention by attention to the
image: queries from the text (with a per-head RMS ``q_norm``), keys and values
projected from the vision states (``k_norm`` on the keys), no rotary embedding. Both
the attention and the MLP output are scaled by ``tanh`` of a learned gate, and the
MLP output of a token that sees no image tile is zeroed. The other layers are
Llama's. The embedding table has 8 rows past ``vocab_size`` (the image token and
reserved ids) while the head has ``vocab_size``, so the head is never tied.

The keys and values depend on the image alone: :meth:`MllamaTextForCausalLM.cross_cache`
makes them once (the VL family's vision graph does), and the decoder reads them as
inputs, as an encoder–decoder's decoder reads its encoder's cache.

Built only as the decoder of ``mllama``: not registered on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    attention_bias,
    lowest_value,
    merge_heads,
    module_scope,
    split_heads,
)
from mobius.errors import ConfigError
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel

#: Rows of the embedding table past ``vocab_size`` (transformers' ``MllamaTextModel``).
EXTRA_EMBEDDINGS = 8


@dataclass
class MllamaTextConfig(LlamaConfig):
    cross_attention_layers: tuple[int, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if fields["tie_word_embeddings"]:
            raise ConfigError("mllama: the embedding has vocab_size + 8 rows; its head is not tied")
        if fields["sliding_window"] is not None:
            raise ConfigError("mllama: its decoder has no sliding-window layers")
        layers = tuple(int(i) for i in hf_config.cross_attention_layers)
        return dict(fields, cross_attention_layers=layers)


class MllamaTextCrossAttention(nn.Module):
    """Text queries over the image's keys and values; no rotary embedding, no causal mask."""

    def __init__(self, config: MllamaTextConfig) -> None:
        super().__init__()
        c = config
        self.q_proj = Linear(c.hidden_size, c.num_attention_heads * c.head_dim)
        self.k_proj = Linear(c.hidden_size, c.num_key_value_heads * c.head_dim)
        self.v_proj = Linear(c.hidden_size, c.num_key_value_heads * c.head_dim)
        self.o_proj = Linear(c.num_attention_heads * c.head_dim, c.hidden_size)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.head_dim = c.head_dim

    def split_heads(self, op, x):
        """``[batch, seq, heads*head_dim]`` → ``[batch, heads, seq, head_dim]``."""
        return split_heads(op, x, head_dim=self.head_dim)

    def project(self, op, states):
        """The cache of one layer from the vision states ``[batch, vision_tokens, hidden]``."""
        key = self.k_norm(op, self.split_heads(op, self.k_proj(op, states)))
        value = self.split_heads(op, self.v_proj(op, states))
        return key, value  # each [batch, kv_heads, vision_tokens, head_dim]

    def forward(self, op, x, key, value, bias):
        q = self.q_norm(op, self.split_heads(op, self.q_proj(op, x)))
        y = op.Attention(q, key, value, bias, scale=self.head_dim**-0.5)  # GQA by head counts
        return self.o_proj(op, merge_heads(op, y))


class MllamaCrossAttentionDecoderLayer(nn.Module):
    """``x + tanh(g_attn) * cross_attn(norm(x))``, then ``x + tanh(g_mlp) * row * mlp(norm(x))``."""

    def __init__(self, config: MllamaTextConfig) -> None:
        super().__init__()
        self.cross_attn = MllamaTextCrossAttention(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.cross_attn_attn_gate = nn.Parameter([1])
        self.mlp = GatedMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
        )
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.cross_attn_mlp_gate = nn.Parameter([1])

    def forward(self, op, x, key, value, bias, row_mask):
        h = self.cross_attn(op, self.input_layernorm(op, x), key, value, bias)
        x = op.Add(x, op.Mul(op.Tanh(self.cross_attn_attn_gate), h))
        h = op.Mul(self.mlp(op, self.post_attention_layernorm(op, x)), row_mask)
        return op.Add(x, op.Mul(op.Tanh(self.cross_attn_mlp_gate), h))


def cross_attention_bias(op, cross_attention_mask, tokens_per_tile: int, dtype: ir.DataType):
    """The additive mask ``[batch, 1, seq, vision_tokens]`` and the row mask ``[batch, seq, 1]``.

    ``cross_attention_mask`` int64 ``[batch, seq, num_images, max_num_tiles]`` (the
    processor's) marks the tiles a token sees; every tile is ``tokens_per_tile`` vision
    tokens. A token that sees no tile gets a zero bias (it attends to all tokens alike,
    as transformers does) and a zero row mask.
    """
    seen = op.Cast(op.Unsqueeze(cross_attention_mask, [-1]), to=dtype)  # [b, s, I, T, 1]
    seen = op.Expand(seen, op.Constant(value_ints=[1, 1, 1, 1, tokens_per_tile]))
    seen = op.Reshape(seen, op.Constant(value_ints=[0, 0, -1]))  # [b, s, vision_tokens]
    one = op.CastLike(op.Constant(value_float=1.0), seen)
    lowest = op.CastLike(op.Constant(value_float=lowest_value(dtype)), seen)
    row_mask = op.ReduceMax(seen, op.Constant(value_ints=[-1]), keepdims=1)  # [b, s, 1]
    bias = op.Mul(op.Mul(op.Sub(one, seen), lowest), row_mask)
    return op.Unsqueeze(bias, [1]), row_mask


class MllamaTextModel(LlamaModel):
    """Llama's layers with the cross-attention layers in place at ``cross_attention_layers``."""

    def __init__(self, config: MllamaTextConfig) -> None:
        super().__init__(config)
        self.embed_tokens = Embedding(config.vocab_size + EXTRA_EMBEDDINGS, config.hidden_size)

    def make_layer(self, config: MllamaTextConfig, layer_idx: int):
        if layer_idx in config.cross_attention_layers:
            return MllamaCrossAttentionDecoderLayer(config)
        return super().make_layer(config, layer_idx)

    def forward(
        self, op, input_ids, attention_mask, position_ids, past, cross_bias, row_mask, cross
    ):
        """``past`` and ``cross`` map layer indices to their self- and cross-attention caches."""
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = {}
        for i, layer in enumerate(self.layers):
            if i in cross:
                x = layer(op, x, *cross[i], cross_bias, row_mask)
            else:
                x, presents[i] = layer(op, x, cos_sin, bias, *past[i])
        return self.norm(op, x), presents


class MllamaTextForCausalLM(LlamaForCausalLM):
    """Mllama's decoder; built by the ``mllama`` VL family (see the module docstring)."""

    config_class = MllamaTextConfig
    model_class = MllamaTextModel

    def self_attention_layers(self) -> list[int]:
        """The indices of the layers with a self-attention cache."""
        cross = self.config.cross_attention_layers
        return [i for i in range(self.config.num_hidden_layers) if i not in cross]

    def cross_cache(self, op, states) -> dict:
        """Per cross-attention layer, its ``(key, value)`` from the vision states.

        Traced outside the decoder's forward (in the vision graph), under the layers'
        own names (``model.layers.{i}.cross_attn.k_proj.weight``).
        """
        cache = {}
        for i in self.config.cross_attention_layers:
            layer = self.model.layers[i]
            with module_scope(op, self, self.model, layer, layer.cross_attn):
                cache[i] = layer.cross_attn.project(op, states)
        return cache

    def forward(
        self, op, input_ids, attention_mask, position_ids, past, cross_bias, row_mask, cross
    ):
        """Logits and the self-attention cache; ``cross_bias`` and ``row_mask`` as
        :func:`cross_attention_bias` makes them, ``past``/``cross`` by layer index."""
        hidden, presents = self.model(
            op, input_ids, attention_mask, position_ids, past, cross_bias, row_mask, cross
        )
        return self.lm_head(op, hidden), presents


MODEL_TYPES: dict = {}  # mllama_text_model: the decoder of mllama only
