"""Inkling-2 (``inkling2_text``) and Inkling-2 Loop (``inkling2_loop_text``): Inkling plus deltas.

Inkling-2 keeps Inkling's relative bias and convolutions (``inkling.py``) and adds:
L2-clipped queries/keys (learned per-head scales), RMS-normed values, per-token
attention sinks, a sigmoid output gate, dynamic (per-token) convolution taps on the
keys and values of full layers, softcapped SwiGLU experts, a softcapped head, and
*block attention residuals*: the input of each attention and MLP is a learned-query
softmax mix over the outputs of past blocks of layers. Its checkpoints keep their
original names (``model.llm.layers.{i}.attn.wq_du``...), which the modules take, so
the fused experts stay gate/up interleaved and the graph splits them so. The looped
variant (``inkling2_loop_text``) runs layers ``[loop_start, loop_end)`` several
times; later passes start again from the pre-loop state, receive messages (a
learned-query mix of the previous pass's blocks) through gates, and cache in layers
appended after the model's own (pass ``p`` >= 1, loop layer ``l``: cache
``num_hidden_layers + (p - 1) * loop_layers + l``), as transformers keys them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    TransposedParameter,
    softcap,
)
from mobius.components.moe import (
    StackedTransposedParameter,
    dispatch_experts,
    expert_matmul,
    flatten_tokens,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.inkling import (
    InklingConfig,
    InklingForCausalLM,
    RelativeLogits,
    StepContext,
    attend,
    heads_first,
    log_scale,
    step_context,
    transpose_heads,
)
from mobius_text.models.mamba import causal_window

FLOAT = ir.DataType.FLOAT


@dataclass
class Inkling2Config(InklingConfig):
    """``Inkling2TextConfig``: Inkling's fields plus clipping, softcaps and the residual blocks."""

    qk_l2_clip_threshold: float = 22.627416997969522
    rel_l2_clip_threshold: float = 8.0
    n_layers_per_attn_res_block: int = 6
    mlp_gate_softcap: float = 4.0
    mlp_up_softcap: float = 25.0
    final_logit_softcapping: float = 30.0


def l2_clip(op, x, threshold: float):
    """``x`` scaled down to L2 norm ``threshold`` over the last axis where longer."""
    norm = op.Sqrt(op.ReduceSum(op.Mul(x, x), [-1], keepdims=1))
    one = op.CastLike(op.Constant(value_float=1.0), x)
    return op.Mul(x, op.Min(op.Div(threshold, op.Add(norm, 1e-6)), one))


def unit_rms(op, x, eps: float):
    """``x / rms(x)`` over the last axis (no learned scale)."""
    mean_square = op.ReduceMean(op.Mul(x, x), [-1], keepdims=1)
    return op.Div(x, op.Sqrt(op.Add(mean_square, eps)))


def mix_sources(op, query, sources: list, hidden: int, n_q: int = 1) -> list:
    """A block attention residual: learned queries ``[n_q, hidden]`` (or ``[hidden]``) over the
    unit-RMS ``sources`` (each ``[b, seq, hidden]``), softmax over the sources. Returns ``n_q``
    mixes ``[b, seq, hidden]``."""
    stacked = unit_rms(op, op.Concat(*[op.Unsqueeze(s, [2]) for s in sources], axis=2), 1e-6)
    q = op.Reshape(query, op.Constant(value_ints=[-1, hidden]))  # [n_q, hidden]
    scores = op.Mul(op.MatMul(stacked, op.Transpose(q, perm=[1, 0])), hidden**-0.5)  # [b,s,n,n_q]
    probs = op.Transpose(op.Softmax(scores, axis=2), perm=[0, 1, 3, 2])  # [b, s, n_q, n]
    mixes = op.MatMul(probs, stacked)  # [b, s, n_q, hidden]
    return [op.Gather(mixes, op.Constant(value_int=i), axis=2) for i in range(n_q)]


class ParameterList(nn.Module):
    """Parameters named ``0``, ``1``... (checkpoint lists such as ``attn_res.mlp_queries.{i}``)."""

    def __init__(self, shapes: list[list[int]]) -> None:
        super().__init__()
        for i, shape in enumerate(shapes):
            setattr(self, str(i), nn.Parameter(shape))

    def forward(self, op) -> list:
        """The parameters, in order (named in this module's scope)."""
        return [getattr(self, str(i)) for i in range(len(self._parameters))]


class Scale(nn.Module):
    """A learned per-head ``scale [heads, dim]`` (``q_l2_clip``, ``rel_l2_clip``)."""

    def __init__(self, heads: int, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter([heads, dim])

    def forward(self, op, x, threshold: float):
        """``x [b, seq, heads, dim]`` scaled, then L2-clipped to ``threshold``."""
        return l2_clip(op, op.Mul(x, self.scale), threshold)


class ScaledShortConvolution(nn.Module):
    """``(conv(x) + x) / sqrt(kernel + 1)``, the weight ``[channels, 1, kernel]`` named ``weight``."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, 1, kernel])
        self.channels, self.kernel = channels, kernel

    def forward(self, op, x, real, state, dynamic_input=None):
        xs = op.Transpose(op.Mul(x, real), perm=[0, 2, 1])  # [batch, channels, seq]
        window, new_state = causal_window(op, state, xs, self.kernel - 1)
        y = op.Transpose(op.Conv(window, self.weight, group=self.channels), perm=[0, 2, 1])
        return op.Div(op.Add(y, x), float(np.sqrt(self.kernel + 1))), new_state


class DynamicShortConvolution(nn.Module):
    """A causal conv whose taps are ``static_w [kernel, channels]`` plus per-token taps projected
    from ``dynamic_input`` by ``weight_proj [heads*kernel, in]`` (shared within a head);
    ``(conv(x) + x) / sqrt(2 * kernel + 1)``. Tap ``j`` weights the token ``j`` steps back."""

    def __init__(self, channels: int, in_size: int, heads: int, kernel: int) -> None:
        super().__init__()
        self.static_w = nn.Parameter([kernel, channels])
        self.weight_proj = TransposedParameter(heads * kernel, in_size)
        self.channels, self.heads, self.kernel = channels, heads, kernel

    def forward(self, op, x, real, state, dynamic_input):
        k, c = self.kernel, self.channels
        dynamic = op.Reshape(
            op.MatMul(dynamic_input, self.weight_proj),
            op.Constant(value_ints=[0, 0, self.heads, 1, k]),
        )  # [b, seq, heads, 1, k]
        static = op.Reshape(
            op.Transpose(self.static_w, perm=[1, 0]), op.Constant(value_ints=[self.heads, -1, k])
        )  # [heads, channels/heads, k]
        taps = op.Reshape(op.Add(dynamic, static), op.Constant(value_ints=[0, 0, c, k]))
        xs = op.Transpose(op.Mul(x, real), perm=[0, 2, 1])  # [b, channels, seq]
        window, new_state = causal_window(op, state, xs, k - 1)  # [b, channels, k-1+seq]
        lags = [
            op.Unsqueeze(op.Slice(window, [k - 1 - j], [-j if j else 2**62], [2]), [-1])
            for j in range(k)
        ]  # each [b, channels, seq, 1]: the token j steps back
        windows = op.Transpose(op.Concat(*lags, axis=-1), perm=[0, 2, 1, 3])  # [b, seq, c, k]
        y = op.Add(op.ReduceSum(op.Mul(windows, taps), [-1], keepdims=0), x)
        return op.Div(y, float(np.sqrt(2 * k + 1))), new_state


class Inkling2Attention(nn.Module):
    """L2-clipped queries/keys (log-scaled queries in full layers), RMS-normed values, the relative
    bias from clipped relative states, per-token sinks and a sigmoid gate before ``wo_ud``."""

    def __init__(self, config: Inkling2Config, layer_idx: int) -> None:
        super().__init__()
        heads, kv_heads, d = config.attention_shape(layer_idx)
        hidden, kernel, d_rel = config.hidden_size, config.conv_kernel_size, config.d_rel
        self.full = config.layer_types[layer_idx] == "full_attention"
        self.wq_du = Linear(hidden, heads * d)
        self.wk_dv = Linear(hidden, kv_heads * d)
        self.wv_dv = Linear(hidden, kv_heads * d)
        self.wr_du = Linear(hidden, heads * d_rel)
        self.wo_ud = Linear(heads * d, hidden)
        self.gate_attn = Linear(hidden, heads * d)
        self.attn_sink_proj = Linear(hidden, heads)
        self.q_l2_clip = Scale(heads, d)
        self.rel_l2_clip = Scale(heads, d_rel)
        self.rel_logits_proj = RelativeLogits(
            d_rel, config.rel_extent if self.full else config.sliding_window
        )
        if self.full:
            self.k_sconv = DynamicShortConvolution(kv_heads * d, hidden, kv_heads, kernel)
            self.v_sconv = DynamicShortConvolution(kv_heads * d, hidden, kv_heads, kernel)
        else:
            self.k_sconv = ScaledShortConvolution(kv_heads * d, kernel)
            self.v_sconv = ScaledShortConvolution(kv_heads * d, kernel)
        self.heads, self.kv_heads, self.head_dim, self.d_rel = heads, kv_heads, d, d_rel
        self.qk_clip, self.rel_clip = config.qk_l2_clip_threshold, config.rel_l2_clip_threshold
        self.log_scaling = (config.log_scaling_n_floor, config.log_scaling_alpha)
        self.eps = config.rms_norm_eps

    def scaled(self, op, x, ctx: StepContext):
        """Full layers scale queries and relative states by the log of ``position_ids``."""
        if not self.full:
            return x
        tau = log_scale(op, ctx.position_ids, *self.log_scaling)  # [b, seq]
        return op.Mul(x, op.Unsqueeze(op.CastLike(tau, x), [2, 3]))

    def forward(self, op, q_in, k_in, v_in, ctx: StepContext, past):
        past_key, past_value, key_state, value_state = past
        d = self.head_dim
        key, key_state = self.k_sconv(op, self.wk_dv(op, k_in), ctx.real, key_state, k_in)
        value, value_state = self.v_sconv(op, self.wv_dv(op, v_in), ctx.real, value_state, v_in)
        q = self.scaled(
            op, self.q_l2_clip(op, heads_first(op, self.wq_du(op, q_in), d), self.qk_clip), ctx
        )
        k = l2_clip(op, heads_first(op, key, d), self.qk_clip)
        v = unit_rms(op, heads_first(op, value, d), self.eps)
        key = op.Concat(past_key, transpose_heads(op, k), axis=2)  # [b, kv_heads, total, d]
        value = op.Concat(past_value, transpose_heads(op, v), axis=2)
        rel = heads_first(op, self.wr_du(op, q_in), self.d_rel)
        rel = self.scaled(op, self.rel_l2_clip(op, rel, self.rel_clip), ctx)
        bias = self.rel_logits_proj(op, transpose_heads(op, rel), ctx.distance)
        kind = "full_attention" if self.full else "sliding_attention"
        bias = op.Add(bias, ctx.biases[kind])  # [b, heads, seq, total]
        sinks = op.Unsqueeze(op.Transpose(self.attn_sink_proj(op, q_in), perm=[0, 2, 1]), [-1])
        y = attend(
            op,
            transpose_heads(op, q),
            key,
            value,
            bias,
            self.heads,
            self.kv_heads,
            d,
            d**-0.5,
            sinks,
        )
        y = op.Reshape(transpose_heads(op, y), op.Constant(value_ints=[0, 0, -1]))
        y = op.Mul(y, op.Sigmoid(self.gate_attn(op, q_in)))
        return self.wo_ud(op, y), (key, value, key_state, value_state)


class Inkling2Router(nn.Module):
    """Sigmoid scores, top-k with the correction ``bias``, normalised, times ``route_scale``."""

    def __init__(self, config: Inkling2Config) -> None:
        super().__init__()
        self.weight = TransposedParameter(config.n_routed_experts, config.hidden_size)
        self.bias = nn.Parameter([config.n_routed_experts])  # e_score_correction_bias
        self.top_k, self.route_scale = config.num_experts_per_tok, config.route_scale

    def forward(self, op, x):
        logits = op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT))
        routing = top_k_routing(op, logits, self.top_k, scoring="sigmoid", choice_bias=self.bias)
        return op.Mul(routing, self.route_scale)


class Inkling2Experts(nn.Module):
    """``w2(softcap(g) * sigmoid(g) * softcap(u))`` with ``w13_weight [E, 2*inter, hidden]`` storing
    gate and up rows interleaved (g0, u0, g1, u1...), as the checkpoints do."""

    def __init__(self, config: Inkling2Config) -> None:
        super().__init__()
        e, hidden, inter = config.n_routed_experts, config.hidden_size, config.moe_intermediate_size
        self.w13_weight = StackedTransposedParameter(e, 2 * inter, hidden)
        self.w2_weight = StackedTransposedParameter(e, hidden, inter)
        self.num_experts, self.inter = e, inter
        self.caps = (config.mlp_gate_softcap, config.mlp_up_softcap)

    def expert(self, op, e: int, x):
        gate_up = op.Reshape(
            expert_matmul(op, x, self.w13_weight, e), op.Constant(value_ints=[0, self.inter, 2])
        )
        gate, up = op.Split(gate_up, axis=-1, num_outputs=2, _outputs=2)
        gate, up = op.Squeeze(gate, [-1]), op.Squeeze(up, [-1])
        h = op.Mul(
            op.Mul(softcap(op, gate, self.caps[0]), op.Sigmoid(gate)), softcap(op, up, self.caps[1])
        )
        return expert_matmul(op, h, self.w2_weight, e)

    def forward(self, op, x, routing):
        experts = [
            (lambda op, rows, e=e: self.expert(op, e, rows)) for e in range(self.num_experts)
        ]
        return dispatch_experts(op, x, routing, experts)


class Inkling2MoE(nn.Module):
    """``gate`` then the routed ``experts`` (no shared experts)."""

    def __init__(self, config: Inkling2Config) -> None:
        super().__init__()
        self.gate = Inkling2Router(config)
        self.experts = Inkling2Experts(config)
        self.hidden = config.hidden_size

    def forward(self, op, x):
        flat = flatten_tokens(op, x, self.hidden)
        return unflatten_tokens(op, self.experts(op, flat, self.gate(op, flat)), x)


class MessageGate(nn.Module):
    """``(1 - tanh(f)) * x + tanh(g) * message``, ``f``/``g`` low-rank from both, unit-RMS (loop layers)."""

    def __init__(self, config) -> None:
        super().__init__()
        hidden, rank = config.hidden_size, config.loop_gate_rank
        self.down_weight = TransposedParameter(rank, 2 * hidden)
        self.forget_weight = TransposedParameter(hidden, rank)
        self.gain_weight = TransposedParameter(hidden, rank)
        self.eps = config.rms_norm_eps

    def forward(self, op, x, message):
        both = op.Concat(unit_rms(op, x, self.eps), unit_rms(op, message, self.eps), axis=-1)
        low = op.MatMul(both, self.down_weight)
        forget = op.Tanh(op.MatMul(low, self.forget_weight))
        gain = op.Tanh(op.MatMul(low, self.gain_weight))
        return op.Add(op.Mul(op.Sub(1.0, forget), x), op.Mul(gain, message))


class Controllers(nn.Module):
    """A loop layer's message gates: ``attn`` (queries), ``k``, ``v`` and ``mlp``."""

    def __init__(self, config) -> None:
        super().__init__()
        self.attn, self.k, self.v, self.mlp = (MessageGate(config) for _ in range(4))

    def forward(self, op, gate: str, x, message):
        """``x`` gated with ``message`` by the gate named ``gate``."""
        return getattr(self, gate)(op, x, message)


class Inkling2DecoderLayer(nn.Module):
    """Attention and MoE, each fed by a block attention residual and followed by a scaled conv.

    A layer that starts a block (``layer % n_layers_per_attn_res_block == 0``) restarts the
    running sum: the block just closed (this layer's input) joins the sources.
    """

    def __init__(self, config: Inkling2Config, layer_idx: int, looped: bool = False) -> None:
        super().__init__()
        hidden, kernel, eps = config.hidden_size, config.conv_kernel_size, config.rms_norm_eps
        self.full = config.layer_types[layer_idx] == "full_attention"
        self.first = layer_idx == 0
        self.starts_block = layer_idx % config.n_layers_per_attn_res_block == 0
        self.attn = Inkling2Attention(config, layer_idx)
        if self.full:
            self.q_input_norm = RMSNorm(hidden, eps)
            self.k_input_norm = RMSNorm(hidden, eps)
            self.v_input_norm = RMSNorm(hidden, eps)
        else:
            self.attn_norm = RMSNorm(hidden, eps)
        self.mlp_norm = RMSNorm(hidden, eps)
        self.mlp = Inkling2MoE(config)
        self.attn_sconv = ScaledShortConvolution(hidden, kernel)
        self.mlp_sconv = ScaledShortConvolution(hidden, kernel)
        self.controllers = Controllers(config) if looped else None
        self.hidden = hidden

    def attention_inputs(self, op, x, sources, query, messages):
        """The (normed) query, key and value inputs: mixes of the sources, gated by messages."""
        n_q = 3 if self.full else 1
        mixes = [x] * n_q if self.first else mix_sources(op, query, [*sources, x], self.hidden, n_q)
        mixes = mixes * (3 // n_q)
        if messages is not None:
            gates = ("attn", "k", "v")
            mixes = [
                self.controllers(op, gate, h, m)
                for gate, h, m in zip(gates, mixes, messages[:3], strict=True)
            ]
        if self.full:
            norms = (self.q_input_norm, self.k_input_norm, self.v_input_norm)
            return [norm(op, h) for norm, h in zip(norms, mixes, strict=True)]
        if messages is None:
            return [self.attn_norm(op, mixes[0])] * 3
        return [self.attn_norm(op, h) for h in mixes]

    def forward(self, op, x, sources, queries, ctx: StepContext, past, messages=None):
        attn_query, mlp_query = queries
        q_in, k_in, v_in = self.attention_inputs(op, x, sources, attn_query, messages)
        h, (key, value, key_state, value_state) = self.attn(op, q_in, k_in, v_in, ctx, past[:4])
        h, attn_state = self.attn_sconv(op, h, ctx.real, past[4])
        if self.starts_block:
            sources, residual = [*sources, x], h
        else:
            residual = op.Add(x, h)
        h = mix_sources(op, mlp_query, [*sources, residual], self.hidden)[0]
        if messages is not None:
            h = self.controllers(op, "mlp", h, messages[3])
        h = self.mlp(op, self.mlp_norm(op, h))
        h, mlp_state = self.mlp_sconv(op, h, ctx.real, past[5])
        present = (key, value, key_state, value_state, attn_state, mlp_state)
        return op.Add(residual, h), present


class AttnRes(nn.Module):
    """The learned queries of the block attention residuals (``model.llm.attn_res``).

    ``attn_queries.{i}`` feeds layer ``i + 1``'s attention (``[3, hidden]`` for full layers: query,
    key, value), ``mlp_queries.{i}`` layer ``i``'s MLP, ``output_query`` the final norm.
    """

    def __init__(self, config: Inkling2Config) -> None:
        super().__init__()
        h, types = config.hidden_size, config.layer_types
        self.attn_queries = ParameterList(
            [[3, h] if kind == "full_attention" else [h] for kind in types[1:]]
        )
        self.mlp_queries = ParameterList([[h]] * config.num_hidden_layers)
        self.output_query = nn.Parameter([h])

    def forward(self, op):
        """Per layer ``(attention query, MLP query)``, and the output query."""
        attn, mlp = [None, *self.attn_queries(op)], self.mlp_queries(op)
        return list(zip(attn, mlp, strict=True)), self.output_query


@dataclass
class Inkling2Step:
    """What the layers of one step share: the :class:`StepContext`, the caches, the residual queries."""

    ctx: StepContext
    past: list
    presents: list
    queries: list  # per layer (attention query or None, MLP query)


class Inkling2Model(nn.Module):
    """``model.llm``: normed embeddings, the layers with their block residuals, ``norm``, ``unembed``."""

    def __init__(self, config: Inkling2Config) -> None:
        super().__init__()
        self.config = config
        self.embed = Embedding(config.embed_vocab_size, config.hidden_size)
        self.embed_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.layers = nn.ModuleList(
            [self.make_layer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.attn_res = AttnRes(config)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.unembed = Linear(config.hidden_size, config.embed_vocab_size)  # padded rows

    def make_layer(self, config: Inkling2Config, i: int) -> Inkling2DecoderLayer:
        return Inkling2DecoderLayer(config, i)

    def run(self, op, i: int, x, sources: list, step: Inkling2Step, cache: int, messages=None):
        """Layer ``i`` on cache entry ``cache``; returns its output, adding a closed block to ``sources``."""
        layer = self.layers[i]
        out, step.presents[cache] = layer(
            op, x, sources, step.queries[i], step.ctx, step.past[cache], messages
        )
        if layer.starts_block:
            sources.append(x)
        return out

    def run_layers(self, op, x, sources: list, step: Inkling2Step):
        for i in range(self.config.num_hidden_layers):
            x = self.run(op, i, x, sources, step, i)
        return x

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        x = self.embed_norm(op, self.embed(op, input_ids))  # [batch, seq, hidden]
        ctx = step_context(op, input_ids, attention_mask, position_ids, windows, x)
        queries, output_query = self.attn_res(op)
        step = Inkling2Step(ctx, past, [None] * len(past), queries)
        sources = []
        x = self.run_layers(op, x, sources, step)
        x = mix_sources(op, output_query, [*sources, x], self.config.hidden_size)[0]
        return self.unembed(op, self.norm(op, x)), step.presents


class Inkling2Backbone(nn.Module):
    """``model``: holds ``llm`` (the checkpoints' prefix)."""

    def __init__(self, llm: nn.Module) -> None:
        super().__init__()
        self.llm = llm

    def forward(self, op, *args):
        return self.llm(op, *args)


class Inkling2ForCausalLM(InklingForCausalLM):
    """``model.llm`` ends with its padded ``unembed``: its logits cut to ``unpadded_vocab_size``, softcapped."""

    config_class = Inkling2Config
    model_class = Inkling2Model

    def make_backbone(self, config: Inkling2Config) -> nn.Module:
        return Inkling2Backbone(self.model_class(config))

    def make_head(self, config: Inkling2Config) -> None:
        return None  # ``model.llm.unembed``

    def logits(self, op, logits):
        logits = self.unpadded(op, logits)
        return softcap(op, logits, self.config.final_logit_softcapping)


@dataclass
class Inkling2LoopConfig(Inkling2Config):
    """``Inkling2LoopTextConfig``: which layers loop, how many passes, the message gates' rank."""

    loop_layer_index_start: int = 6
    loop_layer_index_end: int = 18
    loop_num_passes: int = 3
    loop_gate_rank: int = 64

    @property
    def loop_layers(self) -> list[int]:
        return list(range(self.loop_layer_index_start, self.loop_layer_index_end))


class Inkling2LoopModel(Inkling2Model):
    """Pre-loop layers, ``loop_num_passes`` passes over the loop layers, the post-loop layers.

    Each pass after the first starts again from the pre-loop state and sources; its layers
    get messages mixed from the previous pass's final state and the blocks it closed after
    its first (``middle_cycle_cross_pass_queries`` rows ``2l, 2l+1``: query and MLP of loop
    layer ``l``; ``..._kv_queries``: key and value).
    """

    def __init__(self, config: Inkling2LoopConfig) -> None:
        super().__init__(config)
        rows = 2 * len(config.loop_layers)
        self.middle_cycle_cross_pass_queries = nn.Parameter([rows, config.hidden_size])
        self.middle_cycle_cross_pass_kv_queries = nn.Parameter([rows, config.hidden_size])

    def make_layer(self, config: Inkling2LoopConfig, i: int) -> Inkling2DecoderLayer:
        return Inkling2DecoderLayer(config, i, looped=i in config.loop_layers)

    def message_queries(self, op, j: int):
        """``[4, hidden]``: loop layer ``j``'s query, key, value and MLP message queries."""
        qm = op.Slice(self.middle_cycle_cross_pass_queries, [2 * j], [2 * j + 2], [0])
        kv = op.Slice(self.middle_cycle_cross_pass_kv_queries, [2 * j], [2 * j + 2], [0])
        q, m = op.Split(qm, axis=0, num_outputs=2, _outputs=2)
        return op.Concat(q, kv, m, axis=0)

    def run_layers(self, op, x, sources: list, step: Inkling2Step):
        c = self.config
        start, end, n = c.loop_layer_index_start, c.loop_layer_index_end, c.num_hidden_layers
        for i in range(end):  # the pre-loop layers, then the first pass
            if i == start:
                pre_x, pre_sources = x, list(sources)
            x = self.run(op, i, x, sources, step, i)
        for p in range(1, c.loop_num_passes):
            # +1: the first block a pass closes is the pre-loop state itself
            previous, previous_x = sources[len(pre_sources) + 1 :], x
            x, sources[:] = pre_x, pre_sources
            for j, i in enumerate(c.loop_layers):
                queries = self.message_queries(op, j)
                messages = mix_sources(op, queries, [*previous, previous_x], c.hidden_size, 4)
                cache = n + (p - 1) * len(c.loop_layers) + j
                x = self.run(op, i, x, sources, step, cache, messages)
        for i in range(end, n):
            x = self.run(op, i, x, sources, step, i)
        return x


class Inkling2LoopForCausalLM(Inkling2ForCausalLM):
    """Inkling-2 with looped middle layers; their later passes cache after the model's layers."""

    config_class = Inkling2LoopConfig
    model_class = Inkling2LoopModel

    def cache_layers(self) -> list[int]:
        c = self.config
        return [*range(c.num_hidden_layers), *c.loop_layers * (c.loop_num_passes - 1)]


MODEL_TYPES = {
    "inkling2_text": Inkling2ForCausalLM,
    "inkling2_loop_text": Inkling2LoopForCausalLM,
}
