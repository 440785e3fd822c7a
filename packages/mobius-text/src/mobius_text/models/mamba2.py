"""Mamba-2: multi-head state space (scalar decay per head, grouped B and C) with a gated RMS norm.

transformers computes the prefill with the chunked SSD algorithm and decodes
with the recurrence; both equal the per-step recurrence run here with ``Scan``
(the parity cases use a small ``chunk_size`` so that several chunks meet).
States per layer: ``conv_state`` [batch, conv_dim, conv_kernel - 1] and
``ssm_state`` [batch, heads, head_dim, state_size].
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Linear
from mobius_text.models.mamba import (
    DepthwiseConv1d,
    MambaConfig,
    MambaForCausalLM,
    MambaModel,
    rms_normalize,
    scan_sequence,
)


@dataclass
class Mamba2Config(MambaConfig):
    num_heads: int = 8
    head_dim: int = 64
    n_groups: int = 1
    time_step_limit: tuple[float, float] = (0.0, float("inf"))

    @classmethod
    def hf_fields(cls, hf_config) -> dict:
        """Mamba's namesakes, the inner width from ``expand`` and no dt projection."""
        fields = super().hf_fields(hf_config)
        fields["intermediate_size"] = int(hf_config.expand * hf_config.hidden_size)
        fields["time_step_limit"] = tuple(hf_config.time_step_limit)
        fields.setdefault("time_step_rank", 0)  # Mamba-2 has no dt projection
        return fields

    @property
    def conv_dim(self) -> int:
        """The causal conv runs over x, B and C."""
        return self.intermediate_size + 2 * self.n_groups * self.state_size

    @property
    def ssm_state_shape(self) -> list[int]:
        """One state matrix per head."""
        return [self.num_heads, self.head_dim, self.state_size]

    @classmethod
    def from_hybrid(cls, hf_config, intermediate_size: int | None = None) -> Mamba2Config:
        """The mixer config of a hybrid that names it ``mamba_*`` (Bamba, Granite-MoE-Hybrid,
        Falcon-H1); ``intermediate_size`` defaults to ``mamba_expand * hidden_size``."""
        if intermediate_size is None:
            intermediate_size = int(hf_config.mamba_expand * hf_config.hidden_size)
        return cls(
            model_type=hf_config.model_type,
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            state_size=hf_config.mamba_d_state,
            conv_kernel=hf_config.mamba_d_conv,
            time_step_rank=0,
            layer_norm_epsilon=hf_config.rms_norm_eps,
            use_bias=hf_config.mamba_proj_bias,
            use_conv_bias=hf_config.mamba_conv_bias,
            num_heads=hf_config.mamba_n_heads,
            head_dim=hf_config.mamba_d_head,
            n_groups=hf_config.mamba_n_groups,
            time_step_limit=tuple(hf_config.time_step_limit or (0.0, float("inf"))),
        )


class GatedRMSNorm(nn.Module):
    """``rms_norm(x * silu(gate))`` over groups of channels, then the learned scale."""

    def __init__(self, dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.groups, self.eps = groups, eps

    def forward(self, op, x, gate):
        x = op.Mul(x, op.Mul(gate, op.Sigmoid(gate)))
        grouped = op.Reshape(x, op.Concat(op.Shape(x, end=-1), [self.groups, -1], axis=0))
        grouped = rms_normalize(op, grouped, self.eps)
        return op.Mul(op.Reshape(grouped, op.Shape(x)), self.weight)


def multihead_scan(op, state, decay, update, readout):
    """``h = decay_t * h + update_t; y_t = h @ readout_t`` per head, over the sequence.

    ``state`` [batch, heads, head_dim, n]; ``decay`` [batch, seq, heads];
    ``update`` [batch, seq, heads, head_dim, n]; ``readout`` [batch, seq, heads, n].
    Returns ``y`` [batch, seq, heads, head_dim] and the last state.
    """

    def step(op, h, decay_t, update_t, readout_t):
        h = op.Add(op.Mul(op.Unsqueeze(decay_t, [-1, -2]), h), update_t)
        y = op.Squeeze(op.MatMul(h, op.Unsqueeze(readout_t, [-1])), [-1])  # [batch, heads, p]
        return h, y

    return scan_sequence(
        op, step, state, (decay, update, readout), (4, 2, 4, 3), (1, 1, 1, 1), "multihead_scan_step"
    )


class Mamba2Mixer(nn.Module):
    def __init__(self, config: Mamba2Config) -> None:
        super().__init__()
        inner, heads = config.intermediate_size, config.num_heads
        group_dim = config.n_groups * config.state_size
        self.conv_dim = config.conv_dim
        self.in_proj = Linear(config.hidden_size, inner + self.conv_dim + heads, config.use_bias)
        self.conv1d = DepthwiseConv1d(self.conv_dim, config.conv_kernel, config.use_conv_bias)
        self.dt_bias = nn.Parameter([heads])
        self.A_log = nn.Parameter([heads])
        self.D = nn.Parameter([heads])
        self.norm = GatedRMSNorm(inner, config.n_groups, config.layer_norm_epsilon)
        self.out_proj = Linear(inner, config.hidden_size, config.use_bias)
        self.inner, self.group_dim, self.heads = inner, group_dim, heads
        self.head_dim, self.groups, self.n = config.head_dim, config.n_groups, config.state_size
        self.dt_limit = config.time_step_limit

    def per_head(self, op, x, width):
        """[batch, seq, groups*n] → [batch, seq, heads, n] (each group serves heads/groups heads)."""
        x = op.Reshape(x, [0, 0, self.groups, 1, width])
        x = op.Expand(x, [1, 1, self.groups, self.heads // self.groups, width])
        return op.Reshape(x, [0, 0, self.heads, width])

    def limit_dt(self, op, dt):
        """Clamp dt to ``time_step_limit`` on multi-token forwards only.

        transformers clamps in its chunked prefill but not in its one-token decode
        update (nor do the reference kernels), so a decode step keeps dt as is.
        """
        low, high = self.dt_limit
        if (low, high) == (0.0, float("inf")):
            return dt
        multi_token = op.Greater(op.Shape(dt, start=1, end=2), 1)
        return op.Where(multi_token, op.Clip(dt, low, min(high, 3.0e38)), dt)

    def forward(self, op, x, real, conv_state, ssm_state):
        x = op.Mul(x, real)
        gate, xbc, dt = op.Split(
            self.in_proj(op, x), [self.inner, self.conv_dim, self.heads], axis=-1, _outputs=3
        )
        xbc, new_conv_state = self.conv1d.causal(op, conv_state, op.Transpose(xbc, perm=[0, 2, 1]))
        xbc = op.Transpose(xbc, perm=[0, 2, 1])  # [batch, seq, conv_dim]
        xbc = op.Mul(op.Mul(xbc, op.Sigmoid(xbc)), real)
        xs, b, c = op.Split(xbc, [self.inner, self.group_dim, self.group_dim], axis=-1, _outputs=3)

        dt = self.limit_dt(op, op.Softplus(op.Add(dt, self.dt_bias)))  # [batch, seq, heads]
        decay = op.Exp(op.Mul(dt, op.Neg(op.Exp(self.A_log))))  # [batch, seq, heads]
        heads_x = op.Reshape(xs, [0, 0, self.heads, self.head_dim])  # [batch, seq, heads, p]
        update = op.Mul(
            op.Unsqueeze(op.Mul(heads_x, op.Unsqueeze(dt, [-1])), [-1]),
            op.Unsqueeze(self.per_head(op, b, self.n), [3]),
        )  # [batch, seq, heads, p, n]
        y, new_ssm_state = multihead_scan(
            op, ssm_state, decay, update, self.per_head(op, c, self.n)
        )
        y = op.Add(y, op.Mul(heads_x, op.Unsqueeze(self.D, [-1])))
        y = self.norm(op, op.Reshape(y, [0, 0, -1]), gate)  # [batch, seq, inner]
        return self.out_proj(op, y), (new_conv_state, new_ssm_state)


class Mamba2Model(MambaModel):
    mixer_class = Mamba2Mixer


class Mamba2ForCausalLM(MambaForCausalLM):
    config_class = Mamba2Config
    model_class = Mamba2Model


MODEL_TYPES = {"mamba2": Mamba2ForCausalLM}
