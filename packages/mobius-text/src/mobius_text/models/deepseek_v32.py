"""DeepSeek-V3.2: DeepSeek-V3 whose MLA attends only to the keys a lightning indexer picks.

The indexer (``self_attn.indexer``) scores every visible key for each query:
``sum_h w_h(x) * relu(q_h · k * head_dim**-0.5)`` with its own small heads (queries
from the MLA's normalised ``q_a`` latent through ``wq_b``; one key per token from
``wk`` + LayerNorm), rotate-half RoPE on the first ``qk_rope_head_dim`` channels, and
``w = weights_proj(x) / sqrt(heads)``. Each query keeps its ``index_topk`` best keys
(after the causal/padding mask); the others are masked out of the attention. The
indexer keys are cached too: per layer the cache is ``key`` (MLA latent), ``value``
(rotated ``k_rot``) and ``index_key`` ``[batch, 1, past, index_head_dim]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    DecoderLayer,
    LayerNorm,
    Linear,
    attention_bias,
    lowest_value,
    merge_heads,
    split_heads,
)
from mobius_text.models.deepseek_v2 import (
    DeepseekV2Attention,
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV2Model,
    DeepseekV2MoE,
    rotate,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class DeepseekV32Config(DeepseekV2Config):
    """DeepSeek-V3's fields plus the indexer's sizes and ``index_topk``."""

    index_topk: int = 2048
    index_head_dim: int = 128
    index_n_heads: int = 64

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            topk_method="noaux_tc",
            norm_topk_prob=bool(hf_config.norm_topk_prob),
            rope_layout="deinterleaved",  # the MLA always rotates interleaved checkpoint pairs
            index_topk=hf_config.index_topk,
            index_head_dim=hf_config.index_head_dim,
            index_n_heads=hf_config.index_n_heads,
        )
        return fields

    def has_indexer(self, layer_idx: int) -> bool:
        """Whether the layer selects its own keys (else it reuses the previous layer's)."""
        return True


class DeepseekV32Indexer(nn.Module):
    """Top-k key selection; returns the additive mask of the unselected keys and its key cache."""

    def __init__(self, config: DeepseekV32Config) -> None:
        super().__init__()
        c = config
        self.wq_b = Linear(c.q_lora_rank, c.index_n_heads * c.index_head_dim)
        self.wk = Linear(c.hidden_size, c.index_head_dim)
        self.k_norm = LayerNorm(c.index_head_dim, 1e-6)
        self.weights_proj = Linear(c.hidden_size, c.index_n_heads)
        self.heads, self.dim, self.rope_dim = c.index_n_heads, c.index_head_dim, c.qk_rope_head_dim
        self.top_k = c.index_topk

    def rotate(self, op, x: ir.Value, cos: ir.Value, sin: ir.Value) -> ir.Value:
        """Rotate-half RoPE over the first ``qk_rope_head_dim`` channels of ``x [b, h, s, D]``."""
        cos, sin = op.CastLike(cos, x), op.CastLike(sin, x)
        return op.RotaryEmbedding(x, cos, sin, rotary_embedding_dim=self.rope_dim)

    def forward(self, op, x, q_resid, position_embeddings, bias, past_key):
        cos, sin = position_embeddings
        q = split_heads(op, self.wq_b(op, q_resid), head_dim=self.dim)
        q = self.rotate(op, q, cos, sin)  # [b, H, s, D]
        k = self.rotate(op, op.Unsqueeze(self.k_norm(op, self.wk(op, x)), [1]), cos, sin)
        key = op.Concat(past_key, k, axis=2)  # [b, 1, total, D]
        scores = op.MatMul(
            op.Cast(q, to=FLOAT), op.Transpose(op.Cast(key, to=FLOAT), perm=[0, 1, 3, 2])
        )
        scores = op.Relu(op.Mul(scores, self.dim**-0.5))  # [b, H, s, total]
        weights = op.Mul(op.Cast(self.weights_proj(op, x), to=FLOAT), self.heads**-0.5)  # [b, s, H]
        weights = op.Unsqueeze(op.Transpose(weights, perm=[0, 2, 1]), [-1])  # [b, H, s, 1]
        index = op.ReduceSum(op.Mul(weights, scores), op.Constant(value_ints=[1]), keepdims=1)
        index = op.Add(index, op.Cast(bias, to=FLOAT))  # [b, 1, s, total]
        total = op.Shape(key, start=2, end=3)
        k_top = op.Min(op.Constant(value_ints=[self.top_k]), total)
        _, chosen = op.TopK(index, k_top, axis=-1, _outputs=2)
        keep = op.ScatterElements(
            op.Mul(index, 0.0),
            chosen,
            op.Expand(op.Constant(value_float=1.0), op.Shape(chosen)),
            axis=-1,
        )
        return op.Cast(keep, to=ir.DataType.BOOL), key


class DeepseekV32Attention(DeepseekV2Attention):
    """MLA over the keys the indexer selected.

    ``forward`` takes the selection of the previous layer (``shared_keep``, unused here;
    layers without an indexer of their own reuse it) and returns its own selection.
    """

    indexer_class = DeepseekV32Indexer

    def __init__(self, config: DeepseekV32Config, has_indexer: bool = True) -> None:
        super().__init__(config)
        self.indexer = self.indexer_class(config) if has_indexer else None

    def project_query(self, op, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value | None]:
        """``(q_resid [b, s, q_lora_rank], query heads [b, H, s, qk_dim], output gate or None)``."""
        q_resid = self.q_a_layernorm(op, self.q_a_proj(op, x))
        return q_resid, self.heads(op, self.q_b_proj(op, q_resid), self.nope + self.rope_dim), None

    def attend(self, op, query, key, value, bias) -> ir.Value:
        """Attention of ``query [b, H, s, qk]`` over the masked keys; HY-V4 adds sinks."""
        return op.Attention(query, key, value, bias, scale=self.scale)

    def key_rotary_input(self, op, k_rot: ir.Value) -> ir.Value:
        """The shared key part ``[b, 1, s, rope]`` before RoPE (Dots 3 normalises it)."""
        return k_rot

    def forward(
        self, op, x, position_embeddings, bias, shared_keep, past_latent, past_k_rot, *past
    ):
        """``past``: the indexer's key cache, on layers with an indexer."""
        cos, sin = position_embeddings
        q_resid, q, gate = self.project_query(op, x)
        if self.indexer is not None:
            keep, index_key = self.indexer(op, x, q_resid, position_embeddings, bias, *past)
            index_cache = (index_key,)
        else:
            keep, index_cache = shared_keep, ()
        if keep is not None:  # None: a layer that attends to every key (Dots 3's sliding layers)
            np_dtype = bias.dtype.numpy()
            lowest = op.Constant(
                value=ir.tensor(np.array(lowest_value(bias.dtype), dtype=np_dtype))
            )
            bias = op.Where(keep, bias, lowest)

        q_nope, q_rot = op.Split(q, [self.nope, self.rope_dim], axis=-1, _outputs=2)
        query = op.Concat(q_nope, rotate(op, q_rot, cos, sin, self.rope_layout), axis=-1)

        compressed = self.kv_a_proj_with_mqa(op, x)  # [b, s, kv_lora_rank + rope]
        latent, k_rot = op.Split(
            compressed, [self.kv_lora_rank, self.rope_dim], axis=-1, _outputs=2
        )
        latent = op.Unsqueeze(self.kv_a_layernorm(op, latent), [1])  # [b, 1, s, kv_lora_rank]
        k_rot = self.key_rotary_input(op, op.Unsqueeze(k_rot, [1]))
        k_rot = rotate(op, k_rot, cos, sin, self.rope_layout)  # [b, 1, s, rope]
        latent = op.Concat(past_latent, latent, axis=2)
        k_rot = op.Concat(past_k_rot, k_rot, axis=2)

        kv = self.heads(op, self.kv_b_proj(op, op.Squeeze(latent, [1])), self.nope + self.v_dim)
        k_nope, value = op.Split(kv, [self.nope, self.v_dim], axis=-1, _outputs=2)
        k_rot_heads = op.Expand(
            k_rot,
            op.Concat(op.Shape(k_nope, end=-1), op.Constant(value_ints=[self.rope_dim]), axis=0),
        )  # [b, H, total, rope]
        key = op.Concat(k_nope, k_rot_heads, axis=-1)

        y = self.attend(op, query, key, value, bias)  # [b, H, s, v]
        y = merge_heads(op, y)
        if gate is not None:  # [b, s, H*v]
            y = op.Mul(y, op.Sigmoid(gate))
        return self.o_proj(op, y), (latent, k_rot, *index_cache), keep


class IndexedDecoderLayer(DecoderLayer):
    """The pre-norm layer; passes the key selection and the whole cache tuple through."""

    def forward(self, op, x, position_embeddings, bias, keep, *past):
        h, present, keep = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, keep, *past
        )
        x = op.Add(x, h)
        x = op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))
        return x, present, keep


class DeepseekV32Model(DeepseekV2Model):
    """DeepSeek's layers; the key selection is passed from layer to layer."""

    attention_class = DeepseekV32Attention

    def make_attention(self, config, layer_idx):
        return self.attention_class(config, config.has_indexer(layer_idx))

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return DeepseekV2MoE(config)
        return super().make_mlp(config, layer_idx)

    def make_layer(self, config, layer_idx):
        layer = super().make_layer(config, layer_idx)
        return IndexedDecoderLayer(
            layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents, keep = [], None
        for layer, past in zip(self.layers, past_key_values, strict=True):
            x, present, keep = layer(op, x, cos_sin, bias, keep, *past)
            presents.append(present)
        return self.norm(op, x), presents


class DeepseekV32ForCausalLM(DeepseekV2ForCausalLM):
    """DeepSeek-V3.2 causal LM (multi-token-prediction layers, when a checkpoint has them, are not used)."""

    config_class = DeepseekV32Config
    model_class = DeepseekV32Model

    def cache_layout(self):
        c = self.config
        mla = [
            ("key", ["batch", 1, "past_sequence", c.kv_lora_rank]),
            ("value", ["batch", 1, "past_sequence", c.qk_rope_head_dim]),
        ]
        index = [("index_key", ["batch", 1, "past_sequence", c.index_head_dim])]
        return [mla + (index if c.has_indexer(i) else []) for i in range(c.num_hidden_layers)]


MODEL_TYPES = {"deepseek_v32": DeepseekV32ForCausalLM}
