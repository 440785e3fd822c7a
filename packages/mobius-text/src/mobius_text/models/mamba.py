"""Mamba (selective state space) and Falcon-Mamba.

No attention and no KV cache: each layer carries two fixed-size states,
``conv_state`` (the last ``conv_kernel - 1`` inputs of its causal depthwise
convolution) and ``ssm_state`` (the recurrent state ``[intermediate, state_size]``).
The selective scan runs step by step with the ONNX ``Scan`` op, in the same
order as transformers' sequential path, so prefill and decode share one graph.
Padding positions are zeroed before and after the convolution, as HF does,
which keeps left-padded rows exact.

The pieces every recurrent and hybrid family shares live here too: the causal
convolution over a cached window (:func:`causal_window`, :meth:`DepthwiseConv1d.causal`),
the padding scale (:func:`real_token_scale`), the hybrid layer loop, layer and backbone
(:func:`run_hybrid_layers`, :class:`HybridDecoderLayer`, :class:`HybridModel`) and the
``Scan`` plumbing of a recurrence (:func:`scan_sequence`).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    Linear,
    RMSNorm,
    TiedLMHead,
    attention_bias,
    get_activation,
    scan_body,
)
from mobius.model import Model


@dataclass
class MambaConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    state_size: int
    conv_kernel: int
    time_step_rank: int
    layer_norm_epsilon: float = 1e-5
    use_bias: bool = False
    use_conv_bias: bool = True
    hidden_act: str = "silu"
    tie_word_embeddings: bool = True
    mixer_rms_eps: float = 1e-6

    @classmethod
    def from_hf(cls, hf_config) -> MambaConfig:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config) -> dict:
        """The fields transformers' config holds under the same names."""
        return {f: getattr(hf_config, f) for f in cls.__dataclass_fields__ if hasattr(hf_config, f)}

    @property
    def conv_dim(self) -> int:
        """The channels of the causal conv and of ``conv_state``."""
        return self.intermediate_size

    @property
    def ssm_state_shape(self) -> list[int]:
        """One sequence's ``ssm_state``."""
        return [self.intermediate_size, self.state_size]

    def state_layout(self) -> list[tuple[str, list]]:
        """The cache of one mixer layer: its conv window and its SSM state."""
        return [
            ("conv_state", ["batch", self.conv_dim, self.conv_kernel - 1]),
            ("ssm_state", ["batch", *self.ssm_state_shape]),
        ]


def real_token_scale(op, attention_mask, input_ids, like):
    """``[batch, seq, 1]``: 1 for this step's real tokens, 0 for padding (the mask's last ``seq`` columns).

    State-space mixers multiply their inputs by it, as transformers does, so
    that left padding leaves the conv and ssm states untouched.
    """
    seq = op.Shape(input_ids, start=1, end=2)
    current = op.Slice(attention_mask, op.Neg(seq), [2**62], [1])
    return op.Unsqueeze(op.CastLike(current, like), [-1])


def hybrid_masks(op, input_ids, attention_mask, x):
    """The causal attention bias of this step and its :func:`real_token_scale`, for hybrids
    whose attention layers use the one and whose state-space layers the other."""
    seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
    bias = attention_bias(op, attention_mask, seq, x.dtype)
    return bias, real_token_scale(op, attention_mask, input_ids, x)  # real: [batch, seq, 1]


def run_hybrid_layers(op, layers, x, input_ids, attention_mask, past, rope=None):
    """Run layers that take ``(x, rope, attention_bias, real_token_scale, layer_past)``.

    The shared loop of the hybrids (Jamba, Nemotron-H, Bamba, LFM2...): attention layers
    use the rotary ``rope`` (``None`` without positional encoding) and the causal bias,
    state-space layers the padding scale. Returns ``x`` and the presents.
    """
    bias, real = hybrid_masks(op, input_ids, attention_mask, x)
    presents = []
    for layer, layer_past in zip(layers, past, strict=True):
        x, present = layer(op, x, rope, bias, real, layer_past)
        presents.append(present)
    return x, presents


class HybridDecoderLayer(nn.Module):
    """``x + mixer(norm(x))``, then ``x + mlp(norm(x))``: a hybrid's layer, with the checkpoint's names.

    The mixer is attention (called with ``rope``, ``bias`` and its KV cache) where
    ``attends``, else a recurrent block (called with ``real`` and its states). A subclass
    builds the parts and names their attributes: :attr:`norm_names` (before the mixer,
    before the MLP), :attr:`attention_name`, :attr:`recurrent_name` and :attr:`mlp_name`.
    """

    norm_names = ("input_layernorm", "pre_ff_layernorm")
    attention_name = "self_attn"
    recurrent_name = "mamba"
    mlp_name = "feed_forward"

    def __init__(self, attends: bool) -> None:
        super().__init__()
        self.attends = attends

    def forward(self, op, x, rope, bias, real, past):
        norm, mlp_norm = (getattr(self, name) for name in self.norm_names)
        h = norm(op, x)
        if self.attends:
            h, present = getattr(self, self.attention_name)(op, h, rope, bias, *past)
        else:
            h, present = getattr(self, self.recurrent_name)(op, h, real, *past)
        x = op.Add(x, h)
        return op.Add(x, getattr(self, self.mlp_name)(op, mlp_norm(op, x))), present


class HybridModel(nn.Module):
    """A hybrid backbone's forward: the embeddings (:meth:`embed`), ``rotary_emb`` (None: no
    positional encoding), the layers through :func:`run_hybrid_layers`, and the final norm,
    named :attr:`norm_name`. Subclasses build the modules under their checkpoints' names."""

    norm_name = "norm"
    rotary_emb = None

    def embed(self, op, input_ids):
        return self.embed_tokens(op, input_ids)

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed(op, input_ids)  # [batch, seq, hidden]
        rope = self.rotary_emb(op, position_ids) if self.rotary_emb is not None else None
        x, presents = run_hybrid_layers(op, self.layers, x, input_ids, attention_mask, past, rope)
        return getattr(self, self.norm_name)(op, x), presents


def _value(name: str, dtype: ir.DataType, rank: int) -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape([None] * rank))


def scan_sequence(op, step, state, sequences, ranks, axes, name: str, y_rank: int | None = None):
    """Run ``step(op, *h, *inputs_t) -> (*h, y_t)`` over the sequence with ``Scan``.

    ``state``: the carried state ``h``, or a tuple of states; ``sequences``: the scanned
    inputs; ``ranks``: the ranks of each state, then of each ``inputs_t``; ``axes``: the
    sequence axis of each of ``sequences``, then of the stacked ``y``. ``y_t`` has rank
    ``y_rank``, one less than the first state's unless given. Returns ``y`` and the last
    state (a tuple of them when ``state`` is a tuple).
    """
    states = state if isinstance(state, tuple) else (state,)
    dtype = states[0].dtype
    n = len(states)
    names = [f"h{i}" for i in range(n)] + [f"x{i}" for i in range(len(sequences))]
    body = scan_body(
        op,
        step,
        inputs=[_value(v, dtype, r) for v, r in zip(names, ranks, strict=True)],
        outputs=[_value(f"h{i}_out", dtype, r) for i, r in enumerate(ranks[:n])]
        + [_value("y", dtype, ranks[0] - 1 if y_rank is None else y_rank)],
        name=name,
    )
    *last, y = op.Scan(
        *states,
        *sequences,
        body=body,
        num_scan_inputs=len(sequences),
        scan_input_axes=list(axes[:-1]),
        scan_output_axes=[axes[-1]],
        _outputs=n + 1,
    )
    return y, tuple(last) if isinstance(state, tuple) else last[0]


def selective_scan(op, state, decay, update, readout):
    """``h = decay_t * h + update_t; y_t = h @ readout_t`` over the sequence.

    ``state`` [batch, inner, n]; ``decay`` and ``update`` [batch, inner, seq, n];
    ``readout`` [batch, seq, n]. Returns ``y`` [batch, inner, seq] and the last state.
    """

    def step(op, h, decay_t, update_t, readout_t):
        h = op.Add(op.Mul(decay_t, h), update_t)  # [batch, inner, n]
        y = op.Squeeze(op.MatMul(h, op.Unsqueeze(readout_t, [-1])), [-1])  # [batch, inner]
        return h, y

    return scan_sequence(
        op, step, state, (decay, update, readout), (3, 3, 3, 2), (2, 2, 1, 2), "selective_scan_step"
    )


class MambaMixer(nn.Module):
    """in_proj → causal depthwise conv → selective scan gated by SiLU → out_proj."""

    def __init__(self, config: MambaConfig) -> None:
        super().__init__()
        inner, n, rank = config.intermediate_size, config.state_size, config.time_step_rank
        self.in_proj = Linear(config.hidden_size, 2 * inner, config.use_bias)
        self.conv1d = DepthwiseConv1d(inner, config.conv_kernel, config.use_conv_bias)
        self.x_proj = Linear(inner, rank + 2 * n)
        self.dt_proj = Linear(rank, inner, bias=True)
        self.A_log = nn.Parameter([inner, n])
        self.D = nn.Parameter([inner])
        self.out_proj = Linear(inner, config.hidden_size, config.use_bias)
        self.act = get_activation(config.hidden_act)
        self.rank, self.n = rank, n

    def ssm_inputs(self, op, x):
        """dt, B, C from the convolved sequence ``x`` [batch, seq, inner]; Falcon-Mamba normalises them."""
        dt, b, c = op.Split(self.x_proj(op, x), [self.rank, self.n, self.n], axis=-1, _outputs=3)
        return dt, b, c

    def forward(self, op, x, real, conv_state, ssm_state):
        x = op.Mul(x, real)  # padding positions contribute nothing
        xs, gate = op.Split(
            op.Transpose(self.in_proj(op, x), perm=[0, 2, 1]), num_outputs=2, axis=1, _outputs=2
        )
        xs, new_conv_state = self.conv1d.causal(op, conv_state, xs)
        xs = self.act(op, xs)  # [batch, inner, seq]
        xs = op.Mul(op.Transpose(xs, perm=[0, 2, 1]), real)  # [batch, seq, inner]

        dt, b, c = self.ssm_inputs(op, xs)
        dt = op.Transpose(op.Softplus(self.dt_proj(op, dt)), perm=[0, 2, 1])  # [batch, inner, seq]
        a = op.Neg(op.Exp(self.A_log))  # [inner, n]
        decay = op.Exp(
            op.Mul(op.Unsqueeze(a, [0, 2]), op.Unsqueeze(dt, [-1]))
        )  # [b, inner, seq, n]
        xs_t = op.Transpose(xs, perm=[0, 2, 1])  # [batch, inner, seq]
        update = op.Mul(
            op.Mul(op.Unsqueeze(dt, [-1]), op.Unsqueeze(b, [1])), op.Unsqueeze(xs_t, [-1])
        )
        y, new_ssm_state = selective_scan(op, ssm_state, decay, update, c)
        y = op.Add(y, op.Mul(xs_t, op.Unsqueeze(self.D, [-1])))
        y = op.Mul(y, self.act(op, gate))  # [batch, inner, seq]
        return self.out_proj(op, op.Transpose(y, perm=[0, 2, 1])), (new_conv_state, new_ssm_state)


def causal_window(op, state, x, keep: int):
    """``state`` then ``x`` [batch, channels, seq] along time, and the next ``state``: the
    window's last ``keep`` steps (what a causal convolution of ``keep + 1`` taps reads)."""
    window = op.Concat(state, x, axis=2)  # [batch, channels, keep + seq]
    return window, op.Slice(window, [-keep], [2**62], [2])


class DepthwiseConv1d(nn.Module):
    """``Conv1d(groups=channels)`` with the checkpoint's ``weight [channels, 1, kernel]``, no padding."""

    def __init__(self, channels: int, kernel: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, 1, kernel])
        self.bias = nn.Parameter([channels]) if bias else None
        self.channels, self.kernel = channels, kernel

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*inputs, group=self.channels)

    def causal(self, op, conv_state, x):
        """Convolve ``x`` [batch, channels, seq] after ``conv_state``, its last ``kernel - 1`` inputs.

        Returns the output [batch, channels, seq] and the new ``conv_state``.
        """
        window, new_state = causal_window(op, conv_state, x, self.kernel - 1)
        return self(op, window), new_state


class MambaBlock(nn.Module):
    def __init__(self, config: MambaConfig, mixer_class=MambaMixer) -> None:
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.mixer = mixer_class(config)

    def forward(self, op, x, real, conv_state, ssm_state):
        h, state = self.mixer(op, self.norm(op, x), real, conv_state, ssm_state)
        return op.Add(x, h), state


class MambaModel(nn.Module):
    mixer_class = MambaMixer

    def __init__(self, config: MambaConfig) -> None:
        super().__init__()
        self.embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [MambaBlock(config, self.mixer_class) for _ in range(config.num_hidden_layers)]
        )
        self.norm_f = RMSNorm(config.hidden_size, config.layer_norm_epsilon)

    def forward(self, op, input_ids, attention_mask, states):
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        real = real_token_scale(op, attention_mask, input_ids, x)  # [batch, seq, 1]
        presents = []
        for layer, (conv_state, ssm_state) in zip(self.layers, states, strict=True):
            x, present = layer(op, x, real, conv_state, ssm_state)
            presents.append(present)
        return self.norm_f(op, x), presents


class MambaForCausalLM(Model):
    config_class = MambaConfig
    model_class = MambaModel

    def __init__(self, config: MambaConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = self.model_class(config)
        if config.tie_word_embeddings:
            self.lm_head = TiedLMHead(self.backbone.embeddings)
        else:
            self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def cache_layout(self):
        return [self.config.state_layout()] * self.config.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, states):
        hidden, presents = self.backbone(op, input_ids, attention_mask, states)
        return self.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights


def rms_normalize(op, x, eps: float):
    """``x / rms(x)`` over the last axis, without a learned scale (Falcon-Mamba's dt, B and C norms)."""
    mean_square = op.ReduceMean(op.Mul(x, x), [-1], keepdims=1)
    return op.Mul(x, op.Reciprocal(op.Sqrt(op.Add(mean_square, eps))))


class FalconMambaMixer(MambaMixer):
    """Mamba with weightless RMS norms on dt, B and C before discretisation."""

    def __init__(self, config: MambaConfig) -> None:
        super().__init__(config)
        self.eps = config.mixer_rms_eps

    def ssm_inputs(self, op, x):
        dt, b, c = super().ssm_inputs(op, x)
        return tuple(rms_normalize(op, t, self.eps) for t in (dt, b, c))


class FalconMambaModel(MambaModel):
    mixer_class = FalconMambaMixer


class FalconMambaForCausalLM(MambaForCausalLM):
    model_class = FalconMambaModel


MODEL_TYPES = {"mamba": MambaForCausalLM, "falcon_mamba": FalconMambaForCausalLM}
