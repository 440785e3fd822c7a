"""JetMoE: a mixture of attention heads (MoA) and a mixture of MLP experts in every layer.

MoA: each token's router picks ``top_k`` attention experts; expert ``e`` projects the
token to one group of queries (``kv_heads`` heads) with ``input_linear[e]``, so a token
has ``top_k * kv_heads`` query heads, slot ``j`` coming from its ``j``-th best expert.
Keys and values (``kv_proj``, shared) are tiled across the slots: query head
``j * kv_heads + h`` reads kv head ``h``. Each slot's attention output goes back through
its expert's ``output_linear[e]``, is weighted by the softmax over the top-k logits and
summed, plus ``bias``. The MLP is a Granite-style stacked-expert MoE plus ``bias``.

ONNX ``Attention`` groups query heads *consecutively* per kv head, so the graph orders
query heads ``h * top_k + j`` (kv head major) and undoes the permutation afterwards.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import DecoderLayer, Linear, RMSNorm, apply_rotary, split_heads
from mobius.components.moe import (
    StackedLinear,
    flatten_tokens,
    scatter_add_rows,
    unflatten_tokens,
    zero_rows,
)
from mobius_text.models.granitemoe import GraniteMoeBlock
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.mixtral import MixtralConfig

LAYER_NORM_EPS = 1e-6  # transformers builds the per-layer norms with their default eps


class JetMoeConfig(MixtralConfig):
    """Mixtral's expert count and top-k, shared by JetMoE's attention and MLP experts."""


class SlotRouter(nn.Module):
    """``layer`` logits; returns each token's top-k experts (best first) and their softmax weights."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.layer = Linear(hidden_size, num_experts)
        self.top_k = top_k

    def forward(self, op, x):
        logits = op.Cast(self.layer(op, x), to=ir.DataType.FLOAT)
        top_logits, experts = op.TopK(logits, op.Constant(value_ints=[self.top_k]), _outputs=2)
        return op.CastLike(op.Softmax(top_logits, axis=-1), x), experts  # [tokens, k] each


class MixtureOfAttentionExperts(nn.Module):
    """Per-expert query (``input_linear``) and output (``output_linear``) projections, and ``bias``."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, query_size: int) -> None:
        super().__init__()
        self.router = SlotRouter(hidden_size, num_experts, top_k)
        self.input_linear = StackedLinear(num_experts, hidden_size, query_size)
        self.output_linear = StackedLinear(num_experts, query_size, hidden_size)
        self.bias = nn.Parameter([hidden_size])
        self.num_experts, self.top_k, self.query_size = num_experts, top_k, query_size

    def forward(self, op, step: str, *args):
        """``self(op, "map", tokens)`` or ``self(op, "reduce", ...)``: both run in this module's scope."""
        if step == "map":
            (tokens,) = args
            gates, experts = self.router(op, tokens)  # [tokens, k] each
            return gates, experts, self.map(op, tokens, experts)
        return self.reduce(op, *args)

    def slots(self, op, experts, e: int):
        """Flat slot positions ``token * top_k + j`` routed to expert ``e``, and their tokens."""
        chosen = op.Reshape(op.Equal(experts, op.Constant(value_int=e)), [-1])
        positions = op.Reshape(op.NonZero(chosen), [-1])  # [n]
        return positions, op.Div(positions, op.Constant(value_int=self.top_k))

    def map(self, op, tokens, experts):
        """Queries of every slot: ``[tokens * top_k, query_size]``."""
        rows = op.Mul(op.Slice(op.Shape(tokens), [0], [1]), self.top_k)
        queries = op.Expand(
            op.CastLike(op.Constant(value_float=0.0), tokens),
            op.Concat(rows, op.Constant(value_ints=[self.query_size]), axis=0),
        )
        for e in range(self.num_experts):
            positions, token_ids = self.slots(op, experts, e)
            q = self.input_linear(op, op.Gather(tokens, token_ids, axis=0), e)
            queries = op.ScatterND(queries, op.Unsqueeze(positions, [-1]), q)
        return queries

    def reduce(self, op, outputs, experts, gates, like):
        """``sum_j gate_j * output_linear[e_j](outputs[slot j]) + bias`` per token."""
        flat_gates = op.Reshape(gates, [-1])
        y = zero_rows(
            op, op.Shape(like, end=1), op.Shape(like, start=1)
        )  # float32 [tokens, hidden]
        for e in range(self.num_experts):
            positions, token_ids = self.slots(op, experts, e)
            out = self.output_linear(op, op.Gather(outputs, positions, axis=0), e)
            out = op.Mul(out, op.Unsqueeze(op.Gather(flat_gates, positions), [-1]))
            y = scatter_add_rows(op, y, token_ids, out)
        return op.Add(op.CastLike(y, like), self.bias)


class JetMoeAttention(nn.Module):
    """Mixture-of-attention self-attention with a KV cache of ``kv_heads`` heads."""

    def __init__(self, config: JetMoeConfig) -> None:
        super().__init__()
        self.kv_heads, self.head_dim = config.num_key_value_heads, config.head_dim
        self.top_k, self.hidden_size = config.num_experts_per_tok, config.hidden_size
        kv_size = self.kv_heads * self.head_dim
        self.experts = MixtureOfAttentionExperts(
            config.hidden_size, config.num_local_experts, self.top_k, kv_size
        )
        self.kv_proj = Linear(config.hidden_size, 2 * kv_size)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        k_, d = self.top_k, self.head_dim
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        # gates, experts: [batch*seq, k]; queries: [batch*seq*k, kv_heads*d]
        gates, experts, queries = self.experts(op, "map", tokens)
        # [batch, seq, k, kv_heads, d] -> [batch, kv_heads, k, seq, d]: heads kv-major
        q = op.Reshape(queries, op.Concat(op.Shape(x, end=2), [k_, self.kv_heads, d], axis=0))
        q = op.Reshape(op.Transpose(q, perm=[0, 3, 2, 1, 4]), [0, self.kv_heads * k_, -1, d])
        key, value = op.Split(self.kv_proj(op, x), axis=-1, num_outputs=2, _outputs=2)
        key, value = (split_heads(op, t, self.kv_heads, d) for t in (key, value))
        cos, sin = position_embeddings
        q, key = apply_rotary(op, q, cos, sin, d), apply_rotary(op, key, cos, sin, d)
        y, present_key, present_value = op.Attention(
            q, key, value, bias, past_key, past_value, scale=d**-0.5, _outputs=3
        )
        # [batch, kv_heads*k, seq, d] -> [batch, seq, k, kv_heads, d] -> [batch*seq*k, kv_heads*d]
        y = op.Reshape(y, [0, self.kv_heads, k_, -1, d])
        y = op.Reshape(op.Transpose(y, perm=[0, 3, 2, 1, 4]), [-1, self.kv_heads * d])
        out = self.experts(op, "reduce", y, experts, gates, tokens)
        return unflatten_tokens(op, out, x), (present_key, present_value)


class JetMoeMoE(GraniteMoeBlock):
    """Granite-style stacked experts (``router.layer``, ``input_linear``, ``output_linear``) plus ``bias``."""

    def __init__(self, config: JetMoeConfig) -> None:
        super().__init__(config, config.intermediate_size)
        self.bias = nn.Parameter([config.hidden_size])

    def forward(self, op, x):
        return op.Add(super().forward(op, x), self.bias)


class JetMoeDecoderLayer(DecoderLayer):
    """The pre-norm layer; the checkpoint names the attention ``self_attention``."""

    attention_name = "self_attention"

    def __init__(self, config: JetMoeConfig) -> None:
        super().__init__(
            JetMoeAttention(config),
            JetMoeMoE(config),
            RMSNorm(config.hidden_size, LAYER_NORM_EPS),
            RMSNorm(config.hidden_size, LAYER_NORM_EPS),
        )


class JetMoeModel(LlamaModel):
    def make_layer(self, config, layer_idx):
        return JetMoeDecoderLayer(config)


class JetMoeForCausalLM(LlamaForCausalLM):
    config_class = JetMoeConfig
    model_class = JetMoeModel


MODEL_TYPES = {"jetmoe": JetMoeForCausalLM}
