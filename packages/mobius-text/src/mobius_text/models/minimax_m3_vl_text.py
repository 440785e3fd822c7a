"""MiniMax-M3 (text decoder, ``minimax_m3_vl_text``): MiniMax-M2's layout with Gemma-style
norms, per-head q/k norms, clamped SwiGLU-OAI MLPs, a shared expert beside sigmoid-routed
fused experts, and block-sparse attention on ``minimax_m3_sparse`` layers.

* Norms scale by ``1 + weight``; ``q_norm``/``k_norm`` normalise each head.
* MLPs (dense, shared expert, experts): ``gate_up`` split in halves, ``gate`` clamped from
  above and ``up`` on both sides at ``swiglu_limit``, ``(up + 1) * gate * sigmoid(alpha * gate)``.
* MoE: top-k of ``sigmoid(logits) + e_score_correction_bias``, unbiased scores renormalised,
  times ``routed_scaling_factor``, plus the shared expert.
* Sparse layers: a lightning indexer (``index_n_heads`` = KV heads, one cached key per token)
  scores every key slot ``j`` for each query, keys with ``j > position`` masked (slots and
  positions as transformers compares them), max-pools the scores into blocks of
  ``index_block_size`` slots, forces the ``index_local_blocks`` blocks ending at the
  query's own block (``position // block``), keeps the ``index_topk_blocks`` best blocks that
  are not empty and masks every other key out of the query's KV group. The cache of such a
  layer adds ``index_key [batch, 1, past, index_head_dim]``.

Attention is written out (MatMul, Softmax in float32) in every layer, not ONNX's
``Attention`` op or ONNX Runtime's ``GroupQueryAttention``: a query with no visible key
(a left pad; with left padding, also a real query whose selected blocks hold only pads)
attends to every key alike in transformers, which those ops do not do, and the indexers
read the keys of such rows. The cost is the fused kernels: attention takes
``[batch, heads, seq, total]`` scores in memory, as the ``Attention`` op's reference does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    Linear,
    apply_rotary,
    attention_bias,
    lowest_value,
    merge_heads,
    repeat_kv,
    rotary_dim,
    split_heads,
)
from mobius.components.moe import (
    StackedGatedExperts,
    flatten_tokens,
    top_k_routing,
    unflatten_tokens,
)
from mobius.errors import ConfigError
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel

FLOAT = ir.DataType.FLOAT
SPARSE = "minimax_m3_sparse"


@dataclass
class MiniMaxM3VLTextConfig(LlamaConfig):
    dense_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    num_local_experts: int = 0
    num_experts_per_tok: int = 1
    routed_scaling_factor: float = 1.0
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    mlp_layer_types: list[str] = field(default_factory=list)
    attention_kinds: list[str] = field(default_factory=list)
    index_n_heads: int = 1
    index_head_dim: int = 1
    index_block_size: int = 1
    index_topk_blocks: int = 1
    index_local_blocks: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        kinds = list(hf_config.layer_types)
        if set(kinds) - {"full_attention", SPARSE}:
            raise ConfigError(f"minimax_m3_vl_text: layer_types {sorted(set(kinds))}")
        index = {
            name: getattr(hf_config, name)
            for name in (
                "index_n_heads",
                "index_head_dim",
                "index_block_size",
                "index_topk_blocks",
                "index_local_blocks",
            )
        }
        if SPARSE in kinds:
            if index["index_n_heads"] != fields["num_key_value_heads"]:
                raise ConfigError("minimax_m3_vl_text: index_n_heads must equal the KV heads")
            if index["index_head_dim"] < rotary_dim(fields["rope"], fields["head_dim"]):
                raise ConfigError("minimax_m3_vl_text: an indexer narrower than the rotary part")
        return dict(
            fields,
            **index,
            sliding_window=None,
            layer_types=[],  # every layer's causal mask is full
            attention_kinds=kinds,
            mlp_layer_types=list(hf_config.mlp_layer_types),
            dense_intermediate_size=hf_config.dense_intermediate_size,
            shared_intermediate_size=hf_config.shared_intermediate_size,
            num_local_experts=hf_config.num_local_experts,
            num_experts_per_tok=hf_config.num_experts_per_tok,
            routed_scaling_factor=float(hf_config.routed_scaling_factor),
            swiglu_alpha=float(hf_config.swiglu_alpha),
            swiglu_limit=float(hf_config.swiglu_limit),
        )


def swiglu_oai(op, gate_up, alpha: float, limit: float):
    """``(up + 1) * gate * sigmoid(alpha * gate)`` of the clamped halves of ``gate_up``."""
    gate, up = op.Split(gate_up, axis=-1, num_outputs=2, _outputs=2)
    gate = op.Min(gate, op.CastLike(op.Constant(value_float=limit), gate))
    up = op.Clip(up, op.CastLike(-limit, up), op.CastLike(limit, up))
    glu = op.Mul(gate, op.Sigmoid(op.Mul(gate, alpha)))
    return op.Mul(op.Add(up, 1.0), glu)


class SwigluOaiMLP(nn.Module):
    def __init__(self, config: MiniMaxM3VLTextConfig, intermediate_size: int) -> None:
        super().__init__()
        self.gate_up_proj = Linear(config.hidden_size, 2 * intermediate_size)
        self.down_proj = Linear(intermediate_size, config.hidden_size)
        self.alpha, self.limit = config.swiglu_alpha, config.swiglu_limit

    def forward(self, op, x):
        return self.down_proj(op, swiglu_oai(op, self.gate_up_proj(op, x), self.alpha, self.limit))


class SwigluOaiExperts(StackedGatedExperts):
    """Fused experts ``gate_up_proj [E, 2*inter, hidden]``, ``down_proj [E, hidden, inter]``."""

    def __init__(self, config: MiniMaxM3VLTextConfig) -> None:
        c = config
        super().__init__(c.num_local_experts, c.hidden_size, c.intermediate_size)
        self.alpha, self.limit = c.swiglu_alpha, c.swiglu_limit

    def expert(self, op, e: int, x):
        index = op.Constant(value_int=e)
        gate_up = op.MatMul(x, op.Gather(self.gate_up_proj, index, axis=0))
        h = swiglu_oai(op, gate_up, self.alpha, self.limit)
        return op.MatMul(h, op.Gather(self.down_proj, index, axis=0))


class BiasedSigmoidRouter(nn.Module):
    """``weight [experts, hidden]`` and the choice bias ``e_score_correction_bias [experts]``."""

    def __init__(self, config: MiniMaxM3VLTextConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter([config.num_local_experts, config.hidden_size])
        self.e_score_correction_bias = nn.Parameter([config.num_local_experts])
        self.top_k = config.num_experts_per_tok

    def forward(self, op, tokens):
        logits = op.MatMul(tokens, op.Transpose(self.weight, perm=[1, 0]))
        return top_k_routing(
            op,
            logits,
            self.top_k,
            scoring="sigmoid",
            choice_bias=self.e_score_correction_bias,
            normalize=True,
        )


class MiniMaxM3SparseMoeBlock(nn.Module):
    def __init__(self, config: MiniMaxM3VLTextConfig) -> None:
        super().__init__()
        self.gate = BiasedSigmoidRouter(config)
        self.experts = SwigluOaiExperts(config)
        self.shared_experts = SwigluOaiMLP(config, config.shared_intermediate_size)
        self.scale, self.hidden_size = config.routed_scaling_factor, config.hidden_size

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [tokens, hidden]
        routed = self.experts(op, tokens, self.gate(op, tokens))
        y = op.Add(op.Mul(routed, self.scale), self.shared_experts(op, tokens))
        return unflatten_tokens(op, y, x)


class MiniMaxM3Indexer(nn.Module):
    """The block selection of a sparse layer: ``keep [batch, kv_heads, seq, total]`` (bool)."""

    def __init__(self, config: MiniMaxM3VLTextConfig) -> None:
        super().__init__()
        c = config
        self.q_proj = Linear(c.hidden_size, c.index_n_heads * c.index_head_dim)
        self.k_proj = Linear(c.hidden_size, c.index_head_dim)
        self.q_norm = GemmaRMSNorm(c.index_head_dim, c.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(c.index_head_dim, c.rms_norm_eps)
        self.dim, self.rotary_dim = c.index_head_dim, rotary_dim(c.rope, c.head_dim)
        self.block, self.top_k, self.local = (
            c.index_block_size,
            c.index_topk_blocks,
            c.index_local_blocks,
        )

    def forward(self, op, x, cos_sin, position_ids, past_key):
        cos, sin = cos_sin
        q = self.q_norm(op, split_heads(op, self.q_proj(op, x), head_dim=self.dim))
        k = self.k_norm(op, op.Unsqueeze(self.k_proj(op, x), [1]))  # [b, 1, s, D]
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        key = op.Concat(past_key, k, axis=2)  # [b, 1, total, D]
        scores = op.MatMul(
            op.Cast(q, to=FLOAT), op.Transpose(op.Cast(key, to=FLOAT), perm=[0, 1, 3, 2])
        )  # [b, H, s, total]
        total = op.Shape(key, start=2, end=3)
        slots = op.Range(op.Constant(value_int=0), op.Squeeze(total, [0]), op.Constant(value_int=1))
        ahead = op.Greater(slots, op.Unsqueeze(position_ids, [1, 3]))  # [b, 1, s, total]
        minus_inf = op.Constant(value_float=-np.inf)
        scores = op.Where(ahead, minus_inf, scores)
        block = op.Constant(value_ints=[self.block])
        blocks = op.Div(op.Sub(op.Add(total, block), 1), block)  # ceil
        pad = op.Sub(op.Mul(blocks, block), total)
        zeros = op.Constant(value_ints=[0, 0, 0, 0, 0, 0, 0])
        scores = op.Pad(scores, op.Concat(zeros, pad, axis=0), minus_inf)
        shape = op.Concat(op.Shape(scores, end=3), blocks, block, axis=0)
        pooled = op.ReduceMax(op.Reshape(scores, shape), op.Constant(value_ints=[-1]), keepdims=0)
        q_block = op.Div(position_ids, block)  # [b, s]
        target = op.Concat(op.Shape(pooled, end=3), op.Constant(value_ints=[1]), axis=0)
        for i in range(self.local):  # the local blocks always win
            local = op.Max(op.Sub(q_block, op.Constant(value_int=i)), op.Constant(value_int=0))
            local = op.Expand(op.Unsqueeze(local, [1, 3]), target)  # [b, H, s, 1]
            inf = op.Expand(op.Constant(value_float=np.inf), target)
            pooled = op.ScatterElements(pooled, local, inf, axis=-1)
        k_top = op.Min(op.Constant(value_ints=[self.top_k]), blocks)
        best, chosen = op.TopK(pooled, k_top, axis=-1, _outputs=2)
        valid = op.Cast(op.Greater(best, minus_inf), to=FLOAT)  # empty blocks are not kept
        none = op.Expand(op.Constant(value_float=0.0), op.Shape(pooled))
        kept = op.ScatterElements(none, chosen, valid, axis=-1)  # [b, H, s, nb]
        kept = op.Expand(op.Unsqueeze(kept, [-1]), shape)  # [b, H, s, nb, block]
        kept = op.Reshape(
            kept, op.Concat(op.Shape(kept, end=3), op.Constant(value_ints=[-1]), axis=0)
        )
        kept = op.Slice(kept, [0], total, [3])  # [b, H, s, total]
        return op.Cast(kept, to=ir.DataType.BOOL), key


class MiniMaxM3Attention(Attention):
    """Per-head Gemma q/k norms, partial RoPE; a sparse layer masks the unselected blocks."""

    def __init__(self, config: MiniMaxM3VLTextConfig, sparse: bool) -> None:
        c = config
        super().__init__(
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            rotary_dim=rotary_dim(c.rope, c.head_dim),
        )
        self.q_norm = GemmaRMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(c.head_dim, c.rms_norm_eps)
        self.indexer = MiniMaxM3Indexer(c) if sparse else None

    def masked_softmax_attention(self, op, q, key, value, bias):
        """``softmax(q k^T * scale + bias) v`` written out: a query whose every key is masked
        (a left-padding row) attends to all keys alike, as transformers' eager attention
        does and ONNX Runtime's ``Attention`` does not; the indexer of a later sparse layer
        reads the keys of such rows, so they must match too."""
        key = repeat_kv(op, key, self.num_heads, self.num_kv_heads, self.head_dim)
        value = repeat_kv(op, value, self.num_heads, self.num_kv_heads, self.head_dim)
        scores = op.MatMul(op.Mul(q, self.scale), op.Transpose(key, perm=[0, 1, 3, 2]))
        scores = op.Add(op.Cast(scores, to=FLOAT), op.Cast(bias, to=FLOAT))  # [b, H, s, total]
        return op.MatMul(op.CastLike(op.Softmax(scores, axis=-1), value), value)

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)
        return self.q_norm(op, q), self.k_norm(op, k), v

    def forward(self, op, x, cos_sin, bias, position_ids, past_key, past_value, *past_index):
        present = ()
        if self.indexer is not None:
            keep, index_key = self.indexer(op, x, cos_sin, position_ids, *past_index)
            lowest = op.CastLike(op.Constant(value_float=lowest_value(bias.dtype)), bias)
            group = self.num_heads // self.num_kv_heads  # a KV group's selection, per query head
            keep = op.Expand(op.Unsqueeze(keep, [2]), op.Constant(value_ints=[1, 1, group, 1, 1]))
            heads = op.Constant(value_ints=[0, self.num_heads])
            keep = op.Reshape(keep, op.Concat(heads, op.Shape(keep, start=3), axis=0))
            bias = op.Where(keep, bias, lowest)  # [b, heads, s, total]
            present = (index_key,)
        q, k, v = self.project_qkv(op, x)
        q, k = self.rotate(op, q, k, cos_sin)
        key = op.Concat(past_key, k, axis=2)  # [b, kv, total, d]
        value = op.Concat(past_value, v, axis=2)
        y = self.masked_softmax_attention(op, q, key, value, bias)
        return self.o_proj(op, merge_heads(op, y)), (key, value, *present)


class MiniMaxM3DecoderLayer(nn.Module):
    def __init__(self, config: MiniMaxM3VLTextConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = MiniMaxM3Attention(config, config.attention_kinds[layer_idx] == SPARSE)
        if config.mlp_layer_types[layer_idx] == "sparse":
            self.mlp = MiniMaxM3SparseMoeBlock(config)
        else:
            self.mlp = SwigluOaiMLP(config, config.dense_intermediate_size)
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x, cos_sin, bias, position_ids, *past):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), cos_sin, bias, position_ids, *past
        )
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x))), present


class MiniMaxM3TextModel(LlamaModel):
    def __init__(self, config: MiniMaxM3VLTextConfig) -> None:
        super().__init__(config)
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def make_layer(self, config, layer_idx):
        return MiniMaxM3DecoderLayer(config, layer_idx)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = []
        for layer, past in zip(self.layers, past_key_values, strict=True):
            x, present = layer(op, x, cos_sin, bias, position_ids, *past)
            presents.append(present)
        return self.norm(op, x), presents


class MiniMaxM3VLForCausalLM(LlamaForCausalLM):
    """MiniMax-M3's text decoder (the ``MiniMaxM3VLForCausalLM`` of transformers)."""

    config_class = MiniMaxM3VLTextConfig
    model_class = MiniMaxM3TextModel
    ignored = ("mtp.*", "model.mtp.*")  # multi-token prediction, which generation does not read

    def cache_layout(self):
        c = self.config
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        layout = []
        for kind in c.attention_kinds:
            layer = [("key", kv), ("value", kv)]
            if kind == SPARSE:
                layer.append(("index_key", ["batch", 1, "past_sequence", c.index_head_dim]))
            layout.append(layer)
        return layout


MODEL_TYPES = {"minimax_m3_vl_text": MiniMaxM3VLForCausalLM}
