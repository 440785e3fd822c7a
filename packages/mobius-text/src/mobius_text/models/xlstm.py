"""xLSTM (the xLSTM-7b "large" layout): mLSTM blocks with a matrix memory.

No attention and no KV cache: each layer carries the mLSTM state, a matrix
memory ``c_state`` [batch, heads, qk_head_dim, v_head_dim], a normaliser
``n_state`` [batch, heads, qk_head_dim] and a running log-scale ``m_state``
[batch, heads, 1]. The recurrence runs step by step with the ONNX ``Scan`` op,
as transformers' sequential kernel does below its chunk size (and its step
kernel at decode), so prefill and decode share one graph. Input and forget
gate pre-activations and the output logits are soft-capped (``cap * tanh(x / cap)``).

transformers' xLSTM ignores the attention mask: padding tokens go through the
recurrence like any other token, and so they do here.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Embedding, Linear, softcap, split_heads
from mobius.model import Model
from mobius_text.models.mamba import scan_sequence


@dataclass
class XlstmConfig:
    """The fields of transformers' ``xLSTMConfig`` the graph needs."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_heads: int
    qk_dim_factor: float = 0.5
    v_dim_factor: float = 1.0
    ffn_proj_factor: float = 2.667
    ffn_round_up_to_multiple_of: int = 64
    use_bias: bool = False
    norm_eps: float = 1e-6
    eps: float = 1e-6
    gate_soft_cap: float | None = 15.0
    output_logit_soft_cap: float | None = 30.0
    weight_mode: str = "single"

    @classmethod
    def from_hf(cls, hf_config) -> XlstmConfig:
        fields = {
            f: getattr(hf_config, f) for f in cls.__dataclass_fields__ if hasattr(hf_config, f)
        }
        config = cls(**fields)
        if config.weight_mode != "single":
            # transformers cannot even initialise a "fused" model (its _init_weights
            # slices the fused gate bias wrongly), so there is nothing to check it against.
            raise NotImplementedError(f"xLSTM weight_mode {config.weight_mode!r} is not supported")
        return config

    @property
    def qk_dim(
        self,
    ) -> int:  # the layer truncates; HF's cache rounds up to 64 (they agree on real models)
        return int(self.hidden_size * self.qk_dim_factor)

    @property
    def v_dim(self) -> int:
        return int(self.hidden_size * self.v_dim_factor)

    @property
    def up_proj_dim(self) -> int:
        multiple = self.ffn_round_up_to_multiple_of
        return int((self.hidden_size * self.ffn_proj_factor + multiple - 1) // multiple * multiple)


def soft_cap(op, x, cap: float | None):
    return x if cap is None else softcap(op, x, cap)


def mlstm_scan(op, query, key, value, igate, fgate, c_state, n_state, m_state, scale, eps):
    """The mLSTM recurrence (transformers' ``mlstm_recurrent_step_native``) over the sequence.

    ``query``/``key`` [batch, heads, seq, dqk], ``value`` [batch, heads, seq, dv],
    gates [batch, heads, seq]; ``scale`` is ``dqk ** -0.5``. Returns ``h``
    [batch, heads, seq, dv] and the new states.
    """

    def step(op, c, n, m, q, k, v, i, f):
        i, f = op.Unsqueeze(i, [-1]), op.Unsqueeze(f, [-1])  # [batch, heads, 1]
        f_log = op.Neg(op.Softplus(op.Neg(f)))  # log sigmoid
        decayed = op.Add(f_log, m)
        m = op.Max(decayed, i)
        f_act, i_act = op.Exp(op.Sub(decayed, m)), op.Exp(op.Sub(i, m))
        q = op.Mul(q, scale)
        outer = op.MatMul(op.Unsqueeze(k, [-1]), op.Unsqueeze(v, [-2]))  # [b, h, dqk, dv]
        c = op.Add(op.Mul(op.Unsqueeze(f_act, [-1]), c), op.Mul(op.Unsqueeze(i_act, [-1]), outer))
        n = op.Add(op.Mul(f_act, n), op.Mul(i_act, k))
        q_row = op.Unsqueeze(q, [-2])  # [b, h, 1, dqk]
        h_num = op.Squeeze(op.MatMul(q_row, c), [-2])  # [b, h, dv]
        qn = op.Squeeze(op.MatMul(q_row, op.Unsqueeze(n, [-1])), [-1])  # [b, h, 1]
        h_den = op.Add(op.Max(op.Abs(qn), op.Exp(op.Neg(m))), eps)
        h = op.Div(h_num, h_den)
        return c, n, m, h

    h, (c_state, n_state, m_state) = scan_sequence(
        op,
        step,
        (c_state, n_state, m_state),
        (query, key, value, igate, fgate),
        (4, 3, 3, 3, 3, 3, 2, 2),
        (2, 2, 2, 2, 2, 2),
        "mlstm_step",
        y_rank=3,
    )
    return h, (c_state, n_state, m_state)


class XlstmRMSNorm(nn.Module):
    """``x * rsqrt(mean(x^2) + eps) * weight (+ bias)``."""

    def __init__(self, dim: int, eps: float, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.bias = nn.Parameter([dim]) if bias else None
        self.eps = eps

    def forward(self, op, x):
        y = op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)
        return op.Add(y, self.bias) if self.bias is not None else y


class XlstmMultiHeadLayerNorm(nn.Module):
    """Layer norm of each head's ``[head_dim]`` slice, then one affine over all features."""

    def __init__(self, num_heads: int, head_dim: int, eps: float, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_heads * head_dim])
        self.bias = nn.Parameter([num_heads * head_dim]) if bias else None
        self.eps = eps

    def forward(self, op, x):  # x [batch, seq, heads, head_dim]
        centered = op.Sub(x, op.ReduceMean(x, [-1], keepdims=1))
        variance = op.ReduceMean(op.Mul(centered, centered), [-1], keepdims=1)
        y = op.Div(centered, op.Sqrt(op.Add(variance, self.eps)))
        y = op.Reshape(y, op.Constant(value_ints=[0, 0, -1]))  # [batch, seq, features]
        y = op.Mul(y, self.weight)
        return op.Add(y, self.bias) if self.bias is not None else y


class XlstmLayer(nn.Module):
    """q, k, v, output gate and soft-capped input/forget gates, the mLSTM, head norm, out_proj.

    Only the "single" weight mode (separate projections, as xLSTM-7b ships) is built.
    """

    def __init__(self, config: XlstmConfig) -> None:
        super().__init__()
        hidden, heads, bias = config.hidden_size, config.num_heads, config.use_bias
        qk, v = config.qk_dim, config.v_dim
        self.q = Linear(hidden, qk, bias)
        self.k = Linear(hidden, qk, bias)
        self.v = Linear(hidden, v, bias)
        self.ogate_preact = Linear(hidden, v, bias)
        self.igate_preact = Linear(hidden, heads, bias=True)
        self.fgate_preact = Linear(hidden, heads, bias=True)
        self.multihead_norm = XlstmMultiHeadLayerNorm(heads, v // heads, config.norm_eps, bias)
        self.out_proj = Linear(v, hidden, bias)
        self.config = config

    def forward(self, op, x, state):
        heads = self.config.num_heads
        scale = (self.config.qk_dim // heads) ** -0.5
        gate_cap = self.config.gate_soft_cap
        i = soft_cap(op, self.igate_preact(op, x), gate_cap)  # [batch, seq, heads]
        f = soft_cap(op, self.fgate_preact(op, x), gate_cap)
        q, k, v, o = self.q(op, x), self.k(op, x), self.v(op, x), self.ogate_preact(op, x)

        i, f = op.Transpose(i, perm=[0, 2, 1]), op.Transpose(f, perm=[0, 2, 1])  # [b, heads, seq]
        q, k, v = (split_heads(op, t, heads) for t in (q, k, v))  # [batch, heads, seq, d]
        h, state = mlstm_scan(op, q, k, v, i, f, *state, scale, self.config.eps)
        h = self.multihead_norm(op, op.Transpose(h, perm=[0, 2, 1, 3]))  # [batch, seq, v_dim]
        return self.out_proj(op, op.Mul(op.Sigmoid(o), h)), state


class XlstmFeedForward(nn.Module):
    """``proj_down(silu(proj_up_gate(x)) * proj_up(x))``."""

    def __init__(self, config: XlstmConfig) -> None:
        super().__init__()
        hidden, up, bias = config.hidden_size, config.up_proj_dim, config.use_bias
        self.proj_up_gate = Linear(hidden, up, bias)
        self.proj_up = Linear(hidden, up, bias)
        self.proj_down = Linear(up, hidden, bias)

    def forward(self, op, x):
        gate = self.proj_up_gate(op, x)
        return self.proj_down(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), self.proj_up(op, x)))


class XlstmBlock(nn.Module):
    def __init__(self, config: XlstmConfig) -> None:
        super().__init__()
        hidden, eps, bias = config.hidden_size, config.norm_eps, config.use_bias
        self.norm_mlstm = XlstmRMSNorm(hidden, eps, bias)
        self.mlstm_layer = XlstmLayer(config)
        self.norm_ffn = XlstmRMSNorm(hidden, eps, bias)
        self.ffn = XlstmFeedForward(config)

    def forward(self, op, x, state):
        h, state = self.mlstm_layer(op, self.norm_mlstm(op, x), state)
        x = op.Add(x, h)
        return op.Add(x, self.ffn(op, self.norm_ffn(op, x))), state


class XlstmModel(nn.Module):
    """Embeddings, mLSTM blocks and the output norm (HF ``backbone.*``)."""

    def __init__(self, config: XlstmConfig) -> None:
        super().__init__()
        self.embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList([XlstmBlock(config) for _ in range(config.num_hidden_layers)])
        self.out_norm = XlstmRMSNorm(config.hidden_size, config.norm_eps)

    def forward(self, op, input_ids, states):
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        presents = []
        for block, state in zip(self.blocks, states, strict=True):
            x, present = block(op, x, state)
            presents.append(present)
        return self.out_norm(op, x), presents


class XlstmForCausalLM(Model):
    """xLSTM language model; the attention mask and position ids are unused, as in HF."""

    config_class = XlstmConfig

    def __init__(self, config: XlstmConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = XlstmModel(config)
        # transformers' xLSTM declares no tied weights: the head is its own even when
        # the config says tie_word_embeddings.
        self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def cache_layout(self):
        c = self.config
        dqk, dv = c.qk_dim // c.num_heads, c.v_dim // c.num_heads
        layer = [
            ("c_state", ["batch", c.num_heads, dqk, dv]),
            ("n_state", ["batch", c.num_heads, dqk]),
            ("m_state", ["batch", c.num_heads, 1]),
        ]
        return [layer] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, states):
        hidden, presents = self.backbone(op, input_ids, states)
        logits = soft_cap(op, self.lm_head(op, hidden), self.config.output_logit_soft_cap)
        return logits, presents


MODEL_TYPES = {"xlstm": XlstmForCausalLM}
