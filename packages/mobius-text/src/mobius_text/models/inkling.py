"""Inkling (Thinking Machines): attention with no RoPE, a learned relative bias and short convolutions.

Every layer attends (``hybrid``: full, ``hybrid_sliding``: windowed) and also runs
four causal depthwise convolutions with a residual (``y = conv(x) + x``): on the
keys (``k_sconv``), the values (``v_sconv``), the attention output (``attn_sconv``)
and the MLP output (``mlp_sconv``). So each layer caches its keys and values and
four conv windows of ``conv_kernel_size - 1`` inputs. Positions enter only
through a per-token relative bias: ``r_proj(x)`` mixes a bank of bias-vs-distance
profiles (``rel_logits_proj.proj [d_rel, extent]``) into one bias per head and
backward distance, zero beyond ``extent``. Queries and keys are RMS-normed per head
and scaled by ``1/head_dim``. Full-attention layers may scale queries and the bias
up logarithmically (``log_scaling_n_floor``); like transformers, this reads the
query's index in the cache (left padding counts), not ``position_ids``. MLPs are
dense (``global_scale``) or MoE: sigmoid router over routed and shared experts, the
shared ones always on and weighted in the same normalisation as the routed top-k.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    attention_bias,
    repeat_kv,
)
from mobius.components.moe import (
    StackedGatedExperts,
    StackedTransposedParameter,
    flatten_tokens,
    scatter_top_k,
    unflatten_tokens,
)
from mobius.config import ArchitectureConfig
from mobius.model import Model
from mobius_text.models.mamba import DepthwiseConv1d, real_token_scale

FLOAT = ir.DataType.FLOAT
KIND = {"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}


@dataclass
class InklingConfig(ArchitectureConfig):
    """The fields of ``InklingTextConfig``; ``vocab_size`` is the logits' width (``unpadded_vocab_size``)."""

    embed_vocab_size: int = 0
    swa_num_attention_heads: int = 0
    swa_num_key_value_heads: int = 0
    swa_head_dim: int = 0
    d_rel: int = 16
    rel_extent: int = 1024
    log_scaling_n_floor: int | None = None
    log_scaling_alpha: float = 0.1
    conv_kernel_size: int = 4
    mlp_layer_types: list[str] = field(default_factory=list)
    moe_intermediate_size: int = 0
    n_routed_experts: int = 0
    num_experts_per_tok: int = 0
    n_shared_experts: int = 0
    route_scale: float = 1.0
    logits_mup_width_multiplier: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config) -> dict:
        fields = super().hf_fields(hf_config)
        vocab = hf_config.vocab_size
        unpadded = getattr(hf_config, "unpadded_vocab_size", None)
        fields.update(
            vocab_size=min(vocab, unpadded) if unpadded is not None else vocab,
            embed_vocab_size=vocab,
            rope=None,
            layer_types=[KIND[t] for t in hf_config.layer_types],
            mlp_layer_types=list(getattr(hf_config, "mlp_layer_types", None) or []),
        )
        names = [f for f in cls.__dataclass_fields__ if f not in fields]
        fields.update({f: getattr(hf_config, f) for f in names if hasattr(hf_config, f)})
        return fields

    def attention_shape(self, layer_idx: int) -> tuple[int, int, int]:
        """``(heads, kv_heads, head_dim)`` of layer ``layer_idx`` (sliding layers have their own)."""
        if self.layer_types[layer_idx] == "sliding_attention":
            return self.swa_num_attention_heads, self.swa_num_key_value_heads, self.swa_head_dim
        return self.num_attention_heads, self.num_key_value_heads, self.head_dim


@dataclass
class StepContext:
    """What every layer of one step shares: masks, the padding scale and cache indices."""

    biases: dict  # layer kind -> additive mask [batch, 1, seq, total]
    real: ir.Value  # [batch, seq, 1]: 1 for real tokens of this step
    distance: ir.Value  # [seq, total] int64: query index - key index in the cache
    query_index: ir.Value  # [seq] int64: the queries' indices in the cache
    position_ids: ir.Value  # [batch, seq]


def step_context(op, input_ids, attention_mask, position_ids, windows: dict, x) -> StepContext:
    """The :class:`StepContext` of this step; ``windows`` maps each layer kind to its window,
    ``x`` (the embeddings) gives the float type."""
    seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
    total = op.Squeeze(op.Shape(attention_mask, start=1, end=2), [0])
    query_index = op.Range(op.Sub(total, seq), total, 1)  # [seq]
    key_index = op.Range(0, total, 1)  # [total]
    distance = op.Sub(op.Unsqueeze(query_index, [1]), op.Unsqueeze(key_index, [0]))
    biases = {
        kind: attention_bias(op, attention_mask, seq, x.dtype, window)
        for kind, window in windows.items()
    }
    real = real_token_scale(op, attention_mask, input_ids, x)
    return StepContext(biases, real, distance, query_index, position_ids)


def gather_relative_bias(op, rel_logits, distance, extent: int):
    """``rel_logits [b, h, seq, extent]`` read at each pair's distance: ``[b, h, seq, total]``,
    zero where the key is after the query or ``extent`` or more tokens before it."""
    index = op.Clip(distance, op.Constant(value_int=0), op.Constant(value_int=extent - 1))
    shape = op.Concat(op.Shape(rel_logits, start=0, end=3), op.Shape(distance, start=1), axis=0)
    picked = op.GatherElements(rel_logits, op.Expand(index, shape), axis=3)
    inside = op.And(
        op.GreaterOrEqual(distance, op.Constant(value_int=0)),
        op.Less(distance, op.Constant(value_int=extent)),
    )
    return op.Where(inside, picked, op.CastLike(op.Constant(value_float=0.0), picked))


def log_scale(op, index, n_floor: int, alpha: float):
    """``1 + alpha * log(max((index + 1) / n_floor, 1))`` in float32, for ``index`` int64."""
    ratio = op.Div(op.Cast(op.Add(index, op.Constant(value_int=1)), to=FLOAT), float(n_floor))
    return op.Add(op.Mul(op.Log(op.Max(ratio, op.Constant(value_float=1.0))), alpha), 1.0)


def attend(
    op, q, k, v, bias, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, sinks=None
):
    """``softmax(q k^T * scale + bias) v`` written out (the bias is per head and query).

    ``q [b, heads, seq, d]``, ``k``/``v`` ``[b, kv_heads, total, d]``; returns ``[b, heads, seq, d]``.
    ``sinks [b, heads, seq, 1]``: one more logit per query, with no value (it absorbs mass).
    """
    k = repeat_kv(op, k, num_heads, num_kv_heads, head_dim)
    v = repeat_kv(op, v, num_heads, num_kv_heads, head_dim)
    scores = op.Add(op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), scale), bias)
    if sinks is None:
        return op.MatMul(op.Softmax(scores, axis=-1), v)
    probs = op.Softmax(op.Concat(scores, sinks, axis=-1), axis=-1)
    return op.MatMul(op.Slice(probs, [0], [-1], [-1]), v)


def heads_first(op, x, head_dim: int):
    """``[b, seq, heads*d]`` -> ``[b, seq, heads, d]`` (normalise per head before transposing)."""
    return op.Reshape(x, op.Constant(value_ints=[0, 0, -1, head_dim]))


def transpose_heads(op, x):
    """``[b, seq, heads, d]`` <-> ``[b, heads, seq, d]``."""
    return op.Transpose(x, perm=[0, 2, 1, 3])


class ShortConvolution(nn.Module):
    """``conv(x) + x``: a causal depthwise conv (no bias) over the cached window, padding zeroed first."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.conv1d = DepthwiseConv1d(channels, kernel, bias=False)

    def forward(self, op, x, real, state):
        xs = op.Transpose(op.Mul(x, real), perm=[0, 2, 1])  # [batch, channels, seq]
        y, new_state = self.conv1d.causal(op, state, xs)
        return op.Add(op.Transpose(y, perm=[0, 2, 1]), x), new_state


class RelativeLogits(nn.Module):
    """The bank of bias-vs-distance profiles ``proj [d_rel, extent]``."""

    def __init__(self, d_rel: int, extent: int) -> None:
        super().__init__()
        self.proj = nn.Parameter([d_rel, extent])
        self.extent = extent

    def forward(self, op, rel, distance):
        """``rel [b, heads, seq, d_rel]`` -> bias ``[b, heads, seq, total]``."""
        return gather_relative_bias(op, op.MatMul(rel, self.proj), distance, self.extent)


class InklingAttention(nn.Module):
    """Per-head-normed q/k, short convolutions on k and v, the relative bias, ``1/head_dim`` scale."""

    def __init__(self, config: InklingConfig, layer_idx: int) -> None:
        super().__init__()
        heads, kv_heads, d = config.attention_shape(layer_idx)
        hidden, kernel = config.hidden_size, config.conv_kernel_size
        self.sliding = config.layer_types[layer_idx] == "sliding_attention"
        self.q_proj = Linear(hidden, heads * d)
        self.k_proj = Linear(hidden, kv_heads * d)
        self.v_proj = Linear(hidden, kv_heads * d)
        self.r_proj = Linear(hidden, heads * config.d_rel)
        self.o_proj = Linear(heads * d, hidden)
        self.k_sconv = ShortConvolution(kv_heads * d, kernel)
        self.v_sconv = ShortConvolution(kv_heads * d, kernel)
        self.q_norm = RMSNorm(d, config.rms_norm_eps)
        self.k_norm = RMSNorm(d, config.rms_norm_eps)
        extent = config.sliding_window if self.sliding else config.rel_extent
        self.rel_logits_proj = RelativeLogits(config.d_rel, extent)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d
        self.d_rel = config.d_rel
        self.log_scaling = None
        if not self.sliding and config.log_scaling_n_floor is not None:
            self.log_scaling = (config.log_scaling_n_floor, config.log_scaling_alpha)

    def forward(self, op, x, ctx: StepContext, past):
        past_key, past_value, key_state, value_state = past
        d = self.head_dim
        key, key_state = self.k_sconv(op, self.k_proj(op, x), ctx.real, key_state)
        value, value_state = self.v_sconv(op, self.v_proj(op, x), ctx.real, value_state)
        q = transpose_heads(op, self.q_norm(op, heads_first(op, self.q_proj(op, x), d)))
        k = transpose_heads(op, self.k_norm(op, heads_first(op, key, d)))
        v = transpose_heads(op, heads_first(op, value, d))
        key = op.Concat(past_key, k, axis=2)  # [b, kv_heads, total, d]
        value = op.Concat(past_value, v, axis=2)
        rel = transpose_heads(op, heads_first(op, self.r_proj(op, x), self.d_rel))
        bias = self.rel_logits_proj(op, rel, ctx.distance)  # [b, heads, seq, total]
        if self.log_scaling is not None:
            tau = log_scale(op, ctx.query_index, *self.log_scaling)
            tau = op.Unsqueeze(op.CastLike(tau, q), [1])  # [seq, 1]
            q, bias = op.Mul(q, tau), op.Mul(bias, tau)
        kind = "sliding_attention" if self.sliding else "full_attention"
        bias = op.Add(bias, ctx.biases[kind])
        y = attend(op, q, key, value, bias, self.heads, self.kv_heads, d, 1.0 / d)
        y = op.Reshape(transpose_heads(op, y), op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, y), (key, value, key_state, value_state)


class InklingMLP(GatedMLP):
    """SwiGLU scaled by a learned ``global_scale [1]``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__(hidden_size, intermediate_size, act)
        self.global_scale = nn.Parameter([1])

    def forward(self, op, x):
        return op.Mul(super().forward(op, x), self.global_scale)


class InklingRouter(nn.Module):
    """Sigmoid scores over routed + shared experts; top-k of the routed ones (with the correction
    bias), then ``sigmoid(l) / sum sigmoid(l)`` over the picked and the shared logits."""

    def __init__(self, config: InklingConfig) -> None:
        super().__init__()
        self.num_experts, self.shared = config.n_routed_experts, config.n_shared_experts
        self.weight = nn.Parameter([self.num_experts + self.shared, config.hidden_size])
        self.global_scale = nn.Parameter([1])
        self.e_score_correction_bias = nn.Parameter([self.num_experts])
        self.top_k, self.route_scale = config.num_experts_per_tok, config.route_scale

    def forward(self, op, x):
        """``x [tokens, hidden]`` -> dense routed weights ``[tokens, E]``, shared weights ``[tokens, S]``."""
        weight = op.Cast(op.Transpose(self.weight, perm=[1, 0]), to=FLOAT)
        logits = op.MatMul(op.Cast(x, to=FLOAT), weight)
        routed, shared = op.Split(
            logits, [self.num_experts, self.shared], axis=-1, _outputs=2
        )  # [T, E], [T, S]
        choice = op.Add(op.Sigmoid(routed), op.Cast(self.e_score_correction_bias, to=FLOAT))
        _, indices = op.TopK(choice, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2)
        picked = op.Concat(op.GatherElements(routed, indices, axis=1), shared, axis=-1)
        log_probs = op.Neg(op.Softplus(op.Neg(picked)))  # logsigmoid
        scale = op.Mul(op.Cast(self.global_scale, to=FLOAT), self.route_scale)
        weights = op.Mul(op.Softmax(log_probs, axis=-1), scale)
        top, gammas = op.Split(weights, [self.top_k, self.shared], axis=-1, _outputs=2)
        return scatter_top_k(op, top, indices, routed), gammas


class SharedExperts(nn.Module):
    """The always-on experts, stacked: ``sum_s gamma_s * down_s(silu(gate_s x) * up_s x)``."""

    def __init__(self, shared: int, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = StackedTransposedParameter(shared, inter, hidden)  # stored [S, H, I]
        self.up_proj = StackedTransposedParameter(shared, inter, hidden)
        self.down_proj = StackedTransposedParameter(shared, hidden, inter)  # stored [S, I, H]

    def forward(self, op, x, gammas):
        """``x [T, hidden]``, ``gammas [T, S]`` -> ``[T, hidden]``."""
        xs = op.Unsqueeze(x, [0])  # [1, T, H]
        gate = op.MatMul(xs, self.gate_proj)  # [S, T, I]
        h = op.Mul(op.Mul(gate, op.Sigmoid(gate)), op.MatMul(xs, self.up_proj))
        h = op.Mul(h, op.Unsqueeze(op.Transpose(op.CastLike(gammas, x), perm=[1, 0]), [-1]))
        return op.ReduceSum(op.MatMul(h, self.down_proj), [0], keepdims=0)


class InklingMoE(nn.Module):
    """``gate`` -> routed ``experts`` (fused ``gate_up_proj``) + weighted ``shared_experts``."""

    def __init__(self, config: InklingConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.moe_intermediate_size
        self.gate = InklingRouter(config)
        self.experts = StackedGatedExperts(
            config.n_routed_experts, hidden, inter, config.hidden_act
        )
        self.shared_experts = SharedExperts(config.n_shared_experts, hidden, inter)
        self.hidden = hidden

    def forward(self, op, x):
        flat = flatten_tokens(op, x, self.hidden)  # [T, hidden]
        routing, gammas = self.gate(op, flat)
        y = op.Add(self.experts(op, flat, routing), self.shared_experts(op, flat, gammas))
        return unflatten_tokens(op, y, x)


class InklingDecoderLayer(nn.Module):
    """``x + attn_sconv(attn(norm(x)))``, then ``x + mlp_sconv(mlp(norm(x)))``."""

    def __init__(self, config: InklingConfig, layer_idx: int) -> None:
        super().__init__()
        hidden, kernel = config.hidden_size, config.conv_kernel_size
        self.input_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        self.self_attn = InklingAttention(config, layer_idx)
        self.attn_sconv = ShortConvolution(hidden, kernel)
        self.post_attention_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        if config.mlp_layer_types[layer_idx] == "sparse":
            self.mlp = InklingMoE(config)
        else:
            self.mlp = InklingMLP(hidden, config.intermediate_size, config.hidden_act)
        self.mlp_sconv = ShortConvolution(hidden, kernel)

    def forward(self, op, x, ctx: StepContext, past):
        h, (key, value, key_state, value_state) = self.self_attn(
            op, self.input_layernorm(op, x), ctx, past[:4]
        )
        h, attn_state = self.attn_sconv(op, h, ctx.real, past[4])
        x = op.Add(x, h)
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        h, mlp_state = self.mlp_sconv(op, h, ctx.real, past[5])
        return op.Add(x, h), (key, value, key_state, value_state, attn_state, mlp_state)


class NormedEmbedding(Embedding):
    """A token embedding followed by an RMS norm (``embed_tokens.embed_norm``)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, eps: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.embed_norm = RMSNorm(embedding_dim, eps)

    def forward(self, op, ids):
        return self.embed_norm(op, super().forward(op, ids))


class InklingModel(nn.Module):
    """Normed embeddings, the layers, the final norm (HF ``model.*``)."""

    def __init__(self, config: InklingConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = NormedEmbedding(
            config.embed_vocab_size, config.hidden_size, config.rms_norm_eps
        )
        self.layers = nn.ModuleList(
            [InklingDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        ctx = step_context(op, input_ids, attention_mask, position_ids, windows, x)
        presents = []
        for layer, layer_past in zip(self.layers, past, strict=True):
            x, present = layer(op, x, ctx, layer_past)
            presents.append(present)
        return self.norm(op, x), presents


class InklingForCausalLM(Model):
    """``lm_head(model(x) / logits_mup_width_multiplier)``, cut to ``unpadded_vocab_size`` rows."""

    config_class = InklingConfig
    model_class = InklingModel
    #: multi-token-prediction layers: the causal LM does not run them (nor does transformers')
    ignored = ("model.mtp.*",)

    def __init__(self, config: InklingConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.make_backbone(config)
        self.lm_head = self.make_head(config)

    def make_backbone(self, config: InklingConfig) -> nn.Module:
        return self.model_class(config)

    def make_head(self, config: InklingConfig) -> nn.Module | None:
        """As many rows as the embedding: transformers cuts the logits after the head."""
        return Linear(config.hidden_size, config.embed_vocab_size)

    def cache_layers(self) -> list[int]:
        """The decoder layer each cache entry belongs to, in cache order."""
        return list(range(self.config.num_hidden_layers))

    def cache_layout(self):
        c, layout = self.config, []
        for i in self.cache_layers():
            _, kv_heads, d = c.attention_shape(i)
            kv = ["batch", kv_heads, "past_sequence", d]
            window = c.conv_kernel_size - 1
            layout.append(
                [
                    ("key", kv),
                    ("value", kv),
                    ("key_conv_state", ["batch", kv_heads * d, window]),
                    ("value_conv_state", ["batch", kv_heads * d, window]),
                    ("attn_conv_state", ["batch", c.hidden_size, window]),
                    ("mlp_conv_state", ["batch", c.hidden_size, window]),
                ]
            )
        return layout

    def unpadded(self, op, logits):
        """The logits of the ``unpadded_vocab_size`` first rows of a padded head."""
        if self.config.vocab_size < self.config.embed_vocab_size:
            logits = op.Slice(logits, [0], [self.config.vocab_size], [-1])
        return logits

    def logits(self, op, hidden):
        hidden = op.Div(hidden, self.config.logits_mup_width_multiplier)
        return self.unpadded(op, self.lm_head(op, hidden))

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past)
        return self.logits(op, hidden), presents


MODEL_TYPES = {"inkling_text": InklingForCausalLM}
