"""RWKV-4: time-mix (a linear-attention "WKV" recurrence) and channel-mix blocks.

No attention and no KV cache: each layer carries five fixed-size states
``[batch, dim]``: the last normed input of its time-mix (``att_x``) and of its
channel-mix (``ffn_x``) for the token shift, and the WKV recurrence kept as a
numerator, denominator and running exponent (``att_num``, ``att_den``,
``att_max``) exactly as transformers' sequential CPU path keeps it. The
recurrence runs step by step with the ONNX ``Scan`` op, so prefill and decode
share one graph.

transformers' RWKV ignores the attention mask: padding tokens go through the
recurrence like any other token, and so they do here. In eval mode it also
halves the residual stream every ``rescale_every`` blocks (dividing the
``attention.output`` and ``feed_forward.value`` weights to match); the graph
scales those outputs by the same powers of two, which is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, TiedLMHead
from mobius.model import Model
from mobius_text.models.mamba import scan_sequence

# HF starts the running exponent at -1e30; the cache starts at zero. A zero
# denominator only occurs in a fresh state (it is >= 1 after any token), so the
# graph maps that case to this value and a zero-filled cache is HF's initial one.
_EMPTY_MAX = -1e30


@dataclass
class RwkvConfig:
    """The fields of transformers' ``RwkvConfig`` the graph needs."""

    model_type: str
    vocab_size: int
    hidden_size: int
    attention_hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    layer_norm_epsilon: float = 1e-5
    rescale_every: int = 6
    tie_word_embeddings: bool = False

    @classmethod
    def from_hf(cls, hf_config) -> RwkvConfig:
        fields = {
            f: getattr(hf_config, f) for f in cls.__dataclass_fields__ if hasattr(hf_config, f)
        }
        return cls(**fields)

    def output_scale(self, layer_idx: int) -> float:
        """The factor HF folds into a block's output weights in eval mode."""
        if self.rescale_every <= 0:
            return 1.0
        return 0.5 ** (layer_idx // self.rescale_every)


def time_shift(op, x, last):
    """The previous token of each position: ``last`` [batch, dim] then ``x[:, :-1]``.

    Returns the shifted sequence [batch, seq, dim] and the new ``last`` (``x[:, -1]``).
    """
    window = op.Concat(op.Unsqueeze(last, [1]), x, axis=1)  # [batch, 1+seq, dim]
    shifted = op.Slice(window, [0], [-1], [1])
    return shifted, op.Gather(x, op.Constant(value_int=-1), axis=1)


def mix(op, x, shifted, weight):
    """``x * w + shifted * (1 - w)`` as HF writes it."""
    return op.Add(op.Mul(x, weight), op.Mul(shifted, op.Sub(1.0, weight)))


def wkv_scan(op, decay, bonus, key, value, num, den, exponent):
    """The WKV recurrence over the sequence, in HF's numerically stable form.

    ``decay`` (= -exp(time_decay)) and ``bonus`` (time_first) [dim]; ``key`` and
    ``value`` [batch, seq, dim]; states [batch, dim]. Returns the output
    [batch, seq, dim] and the three new states.
    """

    def step(op, num, den, exponent, decay, bonus, k, v):
        # This token's output: the state plus the current token weighted by exp(bonus + k).
        current = op.Add(k, bonus)
        top = op.Max(exponent, current)
        e1, e2 = op.Exp(op.Sub(exponent, top)), op.Exp(op.Sub(current, top))
        numerator = op.Add(op.Mul(e1, num), op.Mul(e2, v))
        wkv = op.Div(numerator, op.Add(op.Mul(e1, den), e2))
        # The state decays by exp(decay) and takes in the current token.
        decayed = op.Add(exponent, decay)
        top = op.Max(decayed, k)
        e1, e2 = op.Exp(op.Sub(decayed, top)), op.Exp(op.Sub(k, top))
        num = op.Add(op.Mul(e1, num), op.Mul(e2, v))
        den = op.Add(op.Mul(e1, den), e2)
        return num, den, top, op.Identity(decay), op.Identity(bonus), wkv

    # decay and bonus ride along as states: the body reads them at every step.
    out, (num, den, exponent, _, _) = scan_sequence(
        op,
        step,
        (num, den, exponent, decay, bonus),
        (key, value),
        (2, 2, 2, 1, 1, 2, 2),
        (1, 1, 1),
        "wkv_step",
        y_rank=2,
    )
    return out, (num, den, exponent)


class RwkvSelfAttention(nn.Module):
    """Time-mix: token-shifted key, value and receptance, WKV recurrence, output projection."""

    def __init__(self, config: RwkvConfig, layer_idx: int) -> None:
        super().__init__()
        hidden, dim = config.hidden_size, config.attention_hidden_size
        self.time_decay = nn.Parameter([dim])
        self.time_first = nn.Parameter([dim])
        self.time_mix_key = nn.Parameter([1, 1, hidden])
        self.time_mix_value = nn.Parameter([1, 1, hidden])
        self.time_mix_receptance = nn.Parameter([1, 1, hidden])
        self.key = Linear(hidden, dim)
        self.value = Linear(hidden, dim)
        self.receptance = Linear(hidden, dim)
        self.output = Linear(dim, hidden)
        self.scale = config.output_scale(layer_idx)

    def forward(self, op, x, last, num, den, exponent):
        shifted, last = time_shift(op, x, last)
        key = self.key(op, mix(op, x, shifted, self.time_mix_key))  # [batch, seq, dim]
        value = self.value(op, mix(op, x, shifted, self.time_mix_value))
        receptance = op.Sigmoid(self.receptance(op, mix(op, x, shifted, self.time_mix_receptance)))
        fresh = op.Equal(den, 0.0)
        exponent = op.Where(fresh, _EMPTY_MAX, exponent)
        decay = op.Neg(op.Exp(self.time_decay))
        wkv, states = wkv_scan(op, decay, self.time_first, key, value, num, den, exponent)
        out = self.output(op, op.Mul(receptance, wkv))
        if self.scale != 1.0:
            out = op.Mul(out, self.scale)
        return out, (last, *states)


class RwkvFeedForward(nn.Module):
    """Channel-mix: ``sigmoid(receptance) * value(relu(key)^2)`` on token-shifted inputs."""

    def __init__(self, config: RwkvConfig, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.time_mix_key = nn.Parameter([1, 1, hidden])
        self.time_mix_receptance = nn.Parameter([1, 1, hidden])
        self.key = Linear(hidden, config.intermediate_size)
        self.receptance = Linear(hidden, hidden)
        self.value = Linear(config.intermediate_size, hidden)
        self.scale = config.output_scale(layer_idx)

    def forward(self, op, x, last):
        shifted, last = time_shift(op, x, last)
        key = op.Relu(self.key(op, mix(op, x, shifted, self.time_mix_key)))
        value = self.value(op, op.Mul(key, key))
        if self.scale != 1.0:
            value = op.Mul(value, self.scale)
        receptance = op.Sigmoid(self.receptance(op, mix(op, x, shifted, self.time_mix_receptance)))
        return op.Mul(receptance, value), last


class RwkvBlock(nn.Module):
    """Pre-norm time-mix and channel-mix residuals; block 0 also norms the embeddings."""

    def __init__(self, config: RwkvConfig, layer_idx: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_epsilon
        self.pre_ln = LayerNorm(hidden, eps) if layer_idx == 0 else None
        self.ln1 = LayerNorm(hidden, eps)
        self.ln2 = LayerNorm(hidden, eps)
        self.attention = RwkvSelfAttention(config, layer_idx)
        self.feed_forward = RwkvFeedForward(config, layer_idx)

    def forward(self, op, x, state):
        att_x, num, den, exponent, ffn_x = state
        if self.pre_ln is not None:
            x = self.pre_ln(op, x)
        h, (att_x, num, den, exponent) = self.attention(
            op, self.ln1(op, x), att_x, num, den, exponent
        )
        x = op.Add(x, h)
        h, ffn_x = self.feed_forward(op, self.ln2(op, x), ffn_x)
        return op.Add(x, h), (att_x, num, den, exponent, ffn_x)


class RwkvModel(nn.Module):
    """Embeddings, blocks and the output norm (HF ``rwkv.*``)."""

    def __init__(self, config: RwkvConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList([RwkvBlock(config, i) for i in range(config.num_hidden_layers)])
        self.ln_out = LayerNorm(config.hidden_size)  # torch's default eps, as in HF

    def forward(self, op, input_ids, states):
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        every = self.config.rescale_every
        presents = []
        for i, (block, state) in enumerate(zip(self.blocks, states, strict=True)):
            x, present = block(op, x, state)
            if every > 0 and (i + 1) % every == 0:
                x = op.Mul(x, 0.5)
            presents.append(present)
        return self.ln_out(op, x), presents


class RwkvForCausalLM(Model):
    """RWKV-4 language model; the attention mask and position ids are unused, as in HF."""

    config_class = RwkvConfig

    def __init__(self, config: RwkvConfig) -> None:
        super().__init__()
        self.config = config
        self.rwkv = RwkvModel(config)
        if config.tie_word_embeddings:
            self.head = TiedLMHead(self.rwkv.embeddings)
        else:
            self.head = Linear(config.hidden_size, config.vocab_size)

    def cache_layout(self):
        c = self.config
        hidden, dim = ["batch", c.hidden_size], ["batch", c.attention_hidden_size]
        layer = [
            ("att_x", hidden),
            ("att_num", dim),
            ("att_den", dim),
            ("att_max", dim),
            ("ffn_x", hidden),
        ]
        return [layer] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, states):
        hidden, presents = self.rwkv(op, input_ids, states)
        return self.head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        if self.config.tie_word_embeddings:
            weights.pop("head.weight", None)
        return weights


MODEL_TYPES = {"rwkv": RwkvForCausalLM}
