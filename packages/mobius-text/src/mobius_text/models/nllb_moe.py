"""NLLB-MoE: M2M-100's pre-norm stacks whose feed-forward is, every few layers, a top-2 mixture of experts.

Layer ``i`` of a stack is sparse when ``(i + 1) % step == 0`` (``step`` =
``encoder_sparse_step`` / ``decoder_sparse_step``; 0: none). The sparse ``ffn``
routes with fairseq's top-2 gate, at inference as transformers' router does:

* ``softmax(router(x))`` in float32; top-1 is its argmax, top-2 the argmax of the
  logits without the top-1;
* pad tokens of the source route nowhere (unless ``router_ignore_padding_tokens``);
* each expert takes at most ``capacity`` tokens of the whole call (the batch
  flattened row by row, or by decreasing top probability with
  ``batch_prioritized_routing``), top-1 choices before top-2 choices;
  ``capacity = ceil(moe_eval_capacity_token_fraction * tokens)`` when the fraction
  is positive (1.0, the default, never drops), else ``expert_capacity``;
* the two kept probabilities are renormalised to sum to one (after the drops, or
  before them with ``normalize_router_prob_before_dropping``);
* the experts' weighted sum is scaled by ``1 - moe_token_dropout`` (fairseq's
  inference-time stand-in for the training-time token dropout).

Dense layers and each expert are ``fc1``/``fc2`` MLPs. Attention is M2M-100's, the
decoder's cross-attention is named ``cross_attention``, the feed-forward norm
``ff_layer_norm``. Sampling second-expert policies are random at inference: refused.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    CrossAttention,
    LayerNorm,
    Linear,
    Seq2SeqAttention,
    get_activation,
    module_scope,
    padding_bias,
)
from mobius.components.moe import dispatch_experts, flatten_tokens, unflatten_tokens
from mobius.errors import ConfigError
from mobius_text.models.bart import BartConfig
from mobius_text.models.m2m_100 import (
    M2M100Decoder,
    M2M100Encoder,
    M2M100ForConditionalGeneration,
    M2M100Model,
)
from mobius_text.models.switch_transformers import RouterClassifier

INT64, FLOAT, DOUBLE, BOOL = (
    ir.DataType.INT64,
    ir.DataType.FLOAT,
    ir.DataType.DOUBLE,
    ir.DataType.BOOL,
)
EPS = {ir.DataType.FLOAT: 2.0**-23, ir.DataType.FLOAT16: 2.0**-10, ir.DataType.BFLOAT16: 2.0**-7}


@dataclass
class NllbMoeConfig(BartConfig):
    num_experts: int = 128
    expert_capacity: int | None = 64
    router_bias: bool = False
    router_ignore_padding_tokens: bool = False
    encoder_sparse_step: int = 4
    decoder_sparse_step: int = 4
    normalize_router_prob_before_dropping: bool = False
    batch_prioritized_routing: bool = False
    moe_eval_capacity_token_fraction: float = 1.0
    moe_token_dropout: float = 0.2

    @classmethod
    def from_hf(cls, hf: Any) -> NllbMoeConfig:
        if hf.router_dtype != "float32":
            raise ConfigError(f"router_dtype {hf.router_dtype!r} is not built; only 'float32'")
        if hf.second_expert_policy != "all":  # 'random' / 'sampling' draw at inference too
            raise ConfigError(
                f"second_expert_policy {hf.second_expert_policy!r} samples at inference; "
                "only 'all' is built"
            )
        fraction = float(hf.moe_eval_capacity_token_fraction)
        if fraction <= 0 and hf.expert_capacity is None:
            # transformers then freezes 2 * ceil(tokens / experts) of its first call
            raise ConfigError("expert_capacity=None with moe_eval_capacity_token_fraction <= 0")
        return dataclasses.replace(
            super().from_hf(hf),
            num_experts=hf.num_experts,
            expert_capacity=hf.expert_capacity,
            router_bias=hf.router_bias,
            router_ignore_padding_tokens=hf.router_ignore_padding_tokens,
            encoder_sparse_step=hf.encoder_sparse_step,
            decoder_sparse_step=hf.decoder_sparse_step,
            normalize_router_prob_before_dropping=hf.normalize_router_prob_before_dropping,
            batch_prioritized_routing=hf.batch_prioritized_routing,
            moe_eval_capacity_token_fraction=fraction,
            moe_token_dropout=float(hf.moe_token_dropout),
        )


def _const(op, value, dtype):
    return op.Constant(value=ir.tensor(value, dtype=dtype))


def _kept_probability(op, probs, mask):
    """``[tokens, 1]``: the probability of the expert ``mask`` marks (0 where none)."""
    zero = op.CastLike(op.Constant(value_float=0.0), probs)
    return op.ReduceSum(op.Where(mask, probs, zero), op.Constant(value_ints=[-1]), keepdims=1)


def _normalised(op, probs, top1, top2):
    """Both chosen probabilities divided by their sum (at least the dtype's eps)."""
    p1, p2 = _kept_probability(op, probs, top1), _kept_probability(op, probs, top2)
    eps = op.CastLike(op.Constant(value_float=EPS.get(probs.dtype, 2.0**-23)), probs)
    denom = op.Max(op.Add(p1, p2), eps)
    return op.Div(p1, denom), op.Div(p2, denom)


class NllbMoeTop2Router(nn.Module):
    """fairseq's top-2 gate with expert capacity; see the module docstring."""

    def __init__(self, config: NllbMoeConfig) -> None:
        super().__init__()
        self.classifier = RouterClassifier(
            config.hidden_size, config.num_experts, config.router_bias
        )
        self.config = config

    def _locations(self, op, mask, order, inverse):
        """``[tokens, experts]``: each token's 0-based arrival at each expert (``mask`` int64)."""
        one = op.Constant(value_int=1)
        if order is None:
            return op.Sub(op.CumSum(mask, op.Constant(value_int=0)), one)
        ranked = op.CumSum(op.Gather(mask, order, axis=0), op.Constant(value_int=0))
        return op.Gather(op.Sub(ranked, one), inverse, axis=0)

    def _capacity(self, op, x):
        config = self.config
        fraction = config.moe_eval_capacity_token_fraction
        if fraction <= 0:
            return op.Constant(value_int=config.expert_capacity)
        tokens = op.Cast(op.Shape(x, start=0, end=1), to=DOUBLE)  # [1]
        scaled = op.Mul(tokens, _const(op, fraction, DOUBLE))
        return op.Squeeze(op.Cast(op.Ceil(scaled), to=INT64), [0])

    def forward(self, op, x, real=None):
        """``x [tokens, hidden]``, ``real [tokens, 1]`` bool or None → gates ``[tokens, experts]``."""
        config = self.config
        logits = self.classifier(op, x)  # [tokens, experts], float32
        probs = op.CastLike(op.Softmax(logits, axis=-1), x)
        experts = _const(op, list(range(config.num_experts)), INT64)
        top1 = op.Equal(op.ArgMax(probs, axis=-1, keepdims=1), experts)  # one-hot [tokens, E]
        others = op.Where(top1, op.Constant(value_float=-math.inf), logits)
        top2 = op.Equal(op.ArgMax(others, axis=-1, keepdims=1), experts)
        if config.normalize_router_prob_before_dropping:
            p1, p2 = _normalised(op, probs, top1, top2)
        if real is not None:  # pads route nowhere
            top1, top2 = op.And(top1, real), op.And(top2, real)

        order = inverse = None
        if config.batch_prioritized_routing:  # the most confident tokens arrive first
            best = op.ReduceMax(probs, op.Constant(value_ints=[-1]), keepdims=0)  # [tokens]
            count = op.Shape(best)
            _, order = op.TopK(best, count, axis=0, largest=1, sorted=1, _outputs=2)
            ranks = op.Range(
                op.Constant(value_int=0), op.Squeeze(count, [0]), op.Constant(value_int=1)
            )
            inverse = op.ScatterElements(ranks, order, ranks, axis=0)
        m1, m2 = op.Cast(top1, to=INT64), op.Cast(top2, to=INT64)
        loc1 = self._locations(op, m1, order, inverse)
        loc2 = op.Add(  # top-2 choices queue after every top-1 choice of the expert
            self._locations(op, m2, order, inverse),
            op.ReduceSum(m1, op.Constant(value_ints=[0]), keepdims=1),
        )
        capacity = self._capacity(op, x)
        top1 = op.And(top1, op.Less(loc1, capacity))
        top2 = op.And(top2, op.Less(loc2, capacity))
        if not config.normalize_router_prob_before_dropping:
            p1, p2 = _normalised(op, probs, top1, top2)
        zero = op.CastLike(op.Constant(value_float=0.0), probs)
        return op.Add(op.Where(top1, p1, zero), op.Where(top2, p2, zero))


class NllbMoeDenseActDense(nn.Module):
    """``fc2(act(fc1(x)))``: a dense layer's ``ffn`` and each expert."""

    def __init__(self, config: NllbMoeConfig, ffn_dim: int) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, ffn_dim, bias=True)
        self.fc2 = Linear(ffn_dim, config.hidden_size, bias=True)
        self.act = get_activation(config.act)

    def forward(self, op, x, real=None):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class NllbMoeExperts(nn.Module):
    """``expert_{e}``: one ``fc1``/``fc2`` MLP each, run on the tokens routed to it."""

    def __init__(self, config: NllbMoeConfig, ffn_dim: int) -> None:
        super().__init__()
        for e in range(config.num_experts):
            setattr(self, f"expert_{e}", NllbMoeDenseActDense(config, ffn_dim))
        self.num_experts = config.num_experts

    def forward(self, op, x, gates):
        experts = [getattr(self, f"expert_{e}") for e in range(self.num_experts)]
        return dispatch_experts(op, x, gates, experts)


class NllbMoeSparseMLP(nn.Module):
    def __init__(self, config: NllbMoeConfig, ffn_dim: int) -> None:
        super().__init__()
        self.router = NllbMoeTop2Router(config)
        self.experts = NllbMoeExperts(config, ffn_dim)
        self.hidden_size = config.hidden_size
        self.keep = 1.0 - config.moe_token_dropout if config.moe_token_dropout > 0 else 1.0

    def forward(self, op, x, real=None):
        """``x [batch, seq, hidden]``; ``real [batch*seq, 1]`` bool (source tokens) or None."""
        flat = flatten_tokens(op, x, self.hidden_size)  # capacity counts over the whole batch
        y = self.experts(op, flat, self.router(op, flat, real))
        if self.keep != 1.0:
            y = op.Mul(y, op.CastLike(op.Constant(value_float=self.keep), y))
        return unflatten_tokens(op, y, x)


def _feed_forward(config: NllbMoeConfig, step: int, index: int, ffn_dim: int) -> nn.Module:
    sparse = step > 0 and (index + 1) % step == 0
    return NllbMoeSparseMLP(config, ffn_dim) if sparse else NllbMoeDenseActDense(config, ffn_dim)


class NllbMoeEncoderLayer(nn.Module):
    """Pre-norm self-attention, then the (dense or sparse) ``ffn``."""

    def __init__(self, config: NllbMoeConfig, index: int = 0) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.encoder_heads)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.ffn = _feed_forward(config, config.encoder_sparse_step, index, config.encoder_ffn_dim)
        self.ff_layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, x, bias, real=None):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x), bias))
        return op.Add(x, self.ffn(op, self.ff_layer_norm(op, x), real))


class NllbMoeDecoderLayer(nn.Module):
    def __init__(self, config: NllbMoeConfig, index: int = 0) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.decoder_heads)
        self.self_attn_layer_norm = LayerNorm(d, 1e-5)
        self.cross_attention = CrossAttention(d, config.decoder_heads)
        self.cross_attention_layer_norm = LayerNorm(d, 1e-5)
        self.ffn = _feed_forward(config, config.decoder_sparse_step, index, config.decoder_ffn_dim)
        self.ff_layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, x, causal, cross, past):
        """Decoder tokens are all real: the router masks none of them."""
        h, present = self.self_attn(op, self.self_attn_layer_norm(op, x), causal, *past)
        x = op.Add(x, h)
        cross_bias, key, value = cross
        norm = self.cross_attention_layer_norm(op, x)
        x = op.Add(x, self.cross_attention(op, norm, cross_bias, key, value))
        return op.Add(x, self.ffn(op, self.ff_layer_norm(op, x))), present


class NllbMoeEncoder(M2M100Encoder):
    layer_class = NllbMoeEncoderLayer

    def __init__(self, config: NllbMoeConfig) -> None:
        super().__init__(config)
        count = config.encoder_layers
        self.layers = nn.ModuleList([NllbMoeEncoderLayer(config, i) for i in range(count)])
        self.ignore_pads = config.router_ignore_padding_tokens

    def forward(self, op, input_ids, attention_mask):
        x = self.embed(op, input_ids, op.Constant(value_int=0))
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, source, source]
        real = None
        if not self.ignore_pads:  # [batch*source, 1] bool
            real = op.Cast(op.Reshape(attention_mask, op.Constant(value_ints=[-1, 1])), to=BOOL)
        for layer in self.layers:
            x = layer(op, x, bias, real)
        return self.finish(op, x)


class NllbMoeDecoder(M2M100Decoder):
    layer_class = NllbMoeDecoderLayer

    def __init__(self, config: NllbMoeConfig) -> None:
        super().__init__(config)
        count = config.decoder_layers
        self.layers = nn.ModuleList([NllbMoeDecoderLayer(config, i) for i in range(count)])


class NllbMoeModel(M2M100Model):
    encoder_class = NllbMoeEncoder
    decoder_class = NllbMoeDecoder


class NllbMoeForConditionalGeneration(M2M100ForConditionalGeneration):
    """M2M-100's head and weight mapping over the NLLB-MoE stacks."""

    config_class = NllbMoeConfig
    model_class = NllbMoeModel

    def encode(self, op, input_ids, attention_mask):
        decoder = self.model.decoder
        with module_scope(op, self.model):
            hidden = self.model.encoder(op, input_ids, attention_mask)
            cross = []
            for layer in decoder.layers:  # computed once here, read at every decoder step
                with module_scope(op, decoder, layer, layer.cross_attention):
                    cross.append(layer.cross_attention.project_kv(op, hidden))
        return hidden, cross


MODEL_TYPES = {"nllb-moe": NllbMoeForConditionalGeneration}
