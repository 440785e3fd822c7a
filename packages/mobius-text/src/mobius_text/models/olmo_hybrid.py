"""OLMo Hybrid: Gated DeltaNet linear-attention layers and OLMo 3 attention layers.

``layer_types`` picks each layer: ``full_attention`` is an OLMo 2/3 post-norm
layer (q/k RMS-normalised over the whole projection; RoPE unless the config has
no ``rope_theta``), ``linear_attention`` a pre-norm layer around a Gated DeltaNet:
q, k, v from separate projections go through one causal depthwise convolution
(SiLU, no bias), q and k are L2-normalised (q then scaled by ``dk^-0.5``), and per
value head the state ``S [dk, dv]`` follows the gated delta rule

    S <- exp(g_t) S;   S <- S + beta_t k_t (v_t - k_t^T S);   o_t = q_t^T S

with ``g = -exp(A_log) * softplus(a_proj(x) + dt_bias)`` and
``beta = sigmoid(b_proj(x))`` (times 2 when negative eigenvalues are allowed).
The output is RMS-normalised per head, gated by ``silu(g_proj(x))``, projected.
States per linear layer: ``conv_state`` [batch, 2*key_dim + value_dim, kernel - 1]
and ``ssm_state`` [batch, value_heads, key_head_dim, value_head_dim].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnxscript import nn

from mobius.components import (
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    make_rotary_embedding,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import (
    DepthwiseConv1d,
    HybridDecoderLayer,
    HybridModel,
    scan_sequence,
)
from mobius_text.models.olmo2 import FullQKNormAttention


@dataclass
class OlmoHybridConfig(LlamaConfig):
    linear_num_key_heads: int = 1
    linear_num_value_heads: int = 1
    linear_key_head_dim: int = 1
    linear_value_head_dim: int = 1
    linear_conv_kernel_dim: int = 4
    linear_allow_neg_eigval: bool = True
    layer_kinds: list[str] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        # A config without rope_theta means NoPE (transformers then builds no rotary module).
        nope = (hf_config.rope_parameters or {}).get("rope_theta") is None
        fields = super().hf_fields(_WithoutRope(hf_config) if nope else hf_config)
        fields.update(
            mlp_bias=False,
            layer_types=[],  # attention layers are all full; the per-layer kinds follow
            layer_kinds=list(hf_config.layer_types),
            rope=None if nope else fields["rope"],
            **{
                name: getattr(hf_config, name)
                for name in (
                    "linear_num_key_heads",
                    "linear_num_value_heads",
                    "linear_key_head_dim",
                    "linear_value_head_dim",
                    "linear_conv_kernel_dim",
                    "linear_allow_neg_eigval",
                )
            },
        )
        return fields


class _WithoutRope:
    """An HF config seen without its (theta-less) ``rope_parameters``."""

    rope_parameters = rope_scaling = rope_theta = None

    def __init__(self, hf_config) -> None:
        self._hf_config = hf_config

    def __getattr__(self, name):
        return getattr(self._hf_config, name)


def gated_delta_rule(op, state, q, k, v, decay, beta, per_channel: bool = False):
    """Run the gated delta rule over axis 1; ``state`` [batch, heads, dk, dv].

    ``q``, ``k`` [batch, seq, heads, dk]; ``v`` [batch, seq, heads, dv];
    ``decay`` (``exp(g)``) and ``beta`` [batch, seq, heads]. With ``per_channel`` (Kimi's
    KDA) ``decay`` is [batch, seq, heads, dk]: each key channel's row of the state decays
    at its own rate. Returns ``o`` [batch, seq, heads, dv] and the last state.
    """
    decay_axes = [-1] if per_channel else [-1, -2]

    def step(op, s, q_t, k_t, v_t, decay_t, beta_t):
        s = op.Mul(s, op.Unsqueeze(decay_t, decay_axes))
        row_k = op.Unsqueeze(k_t, [-2])  # [batch, heads, 1, dk]
        kv_mem = op.MatMul(row_k, s)  # [batch, heads, 1, dv]
        delta = op.Mul(op.Sub(op.Unsqueeze(v_t, [-2]), kv_mem), op.Unsqueeze(beta_t, [-1, -2]))
        s = op.Add(s, op.MatMul(op.Unsqueeze(k_t, [-1]), delta))  # + k delta^T
        o = op.Squeeze(op.MatMul(op.Unsqueeze(q_t, [-2]), s), [-2])  # [batch, heads, dv]
        return s, o

    return scan_sequence(
        op,
        step,
        state,
        (q, k, v, decay, beta),
        (4, 3, 3, 3, 3 if per_channel else 2, 2),
        (1,) * 6,
        "gated_delta_step",
    )


def _l2norm(op, x, eps: float = 1e-6):
    return op.Mul(
        x, op.Reciprocal(op.Sqrt(op.Add(op.ReduceSum(op.Mul(x, x), [-1], keepdims=1), eps)))
    )


class GatedRMSNormAfter(nn.Module):
    """``rms_norm(x) * weight * silu(gate)`` over each head's channels."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter([dim])
        self.eps = eps

    def forward(self, op, x, gate):
        y = op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)
        return op.Mul(y, op.Mul(gate, op.Sigmoid(gate)))


class GatedDeltaNet(nn.Module):
    """The Gated DeltaNet mixer (see the module docstring) around the family's projections.

    A subclass creates its projections in :meth:`make_projections`, returns ``[q; k; v]``,
    the output gate, ``b`` and ``a`` from :meth:`project`, and normalises, gates and
    projects the output in :meth:`output`, under its checkpoint's names.
    """

    beta_scale = 1.0

    def __init__(self, config) -> None:
        super().__init__()
        self.k_heads, self.v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.ratio = self.v_heads // self.k_heads  # value heads per key head
        self.key_dim, self.value_dim = self.k_heads * self.dk, self.v_heads * self.dv
        self.make_projections(config)
        # One depthwise conv over [q; k; v].
        self.conv1d = DepthwiseConv1d(
            2 * self.key_dim + self.value_dim, config.linear_conv_kernel_dim, bias=False
        )
        self.A_log = nn.Parameter([self.v_heads])
        self.dt_bias = nn.Parameter([self.v_heads])

    def make_projections(self, config) -> None:
        raise NotImplementedError

    def project(self, op, x):
        """``[q; k; v]`` [batch, seq, conv_dim], the gate [batch, seq, value_dim], ``b`` and ``a``
        [batch, seq, v_heads]."""
        raise NotImplementedError

    def output(self, op, o, gate):
        """``o`` and ``gate`` [batch, seq, v_heads, dv] → the mixer's output [batch, seq, hidden]."""
        raise NotImplementedError

    def key_heads(self, op, x):
        """[batch, seq, k_heads*dk] → [batch, seq, v_heads, dk], each key head repeated in place."""
        x = op.Unsqueeze(op.Reshape(x, [0, 0, self.k_heads, self.dk]), [3])
        x = op.Expand(x, [1, 1, 1, self.ratio, 1])
        return op.Reshape(x, [0, 0, self.v_heads, self.dk])

    def forward(self, op, x, real, conv_state, ssm_state):
        x = op.Mul(x, real)  # padding positions contribute nothing
        qkv, z, b, a = self.project(op, x)
        qkv, new_conv_state = self.conv1d.causal(op, conv_state, op.Transpose(qkv, perm=[0, 2, 1]))
        qkv = op.Transpose(qkv, perm=[0, 2, 1])  # [batch, seq, conv_dim]
        qkv = op.Mul(qkv, op.Sigmoid(qkv))
        q, k, v = op.Split(qkv, [self.key_dim, self.key_dim, self.value_dim], axis=-1, _outputs=3)
        q = op.Mul(_l2norm(op, self.key_heads(op, q)), self.dk**-0.5)
        k = _l2norm(op, self.key_heads(op, k))
        v = op.Reshape(v, [0, 0, self.v_heads, self.dv])
        beta = op.Sigmoid(b)  # [batch, seq, v_heads]
        if self.beta_scale != 1.0:
            beta = op.Mul(beta, self.beta_scale)
        g = op.Mul(op.Neg(op.Exp(self.A_log)), op.Softplus(op.Add(a, self.dt_bias)))
        o, new_ssm_state = gated_delta_rule(op, ssm_state, q, k, v, op.Exp(g), beta)
        gate = op.Reshape(z, [0, 0, self.v_heads, self.dv])
        return self.output(op, o, gate), (new_conv_state, new_ssm_state)


class OlmoHybridGatedDeltaNet(GatedDeltaNet):
    """Separate q, k, v, a, b and gate projections; checkpoints split the conv (see sanitize)."""

    def __init__(self, config: OlmoHybridConfig) -> None:
        super().__init__(config)
        self.o_norm = GatedRMSNormAfter(self.dv, 1e-5)
        self.o_proj = Linear(self.value_dim, config.hidden_size)
        self.beta_scale = 2.0 if config.linear_allow_neg_eigval else 1.0

    def make_projections(self, config: OlmoHybridConfig) -> None:
        hidden = config.hidden_size
        self.q_proj = Linear(hidden, self.key_dim)
        self.k_proj = Linear(hidden, self.key_dim)
        self.v_proj = Linear(hidden, self.value_dim)
        self.a_proj = Linear(hidden, self.v_heads)
        self.b_proj = Linear(hidden, self.v_heads)
        self.g_proj = Linear(hidden, self.value_dim)

    def project(self, op, x):
        qkv = op.Concat(self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x), axis=-1)
        return qkv, self.g_proj(op, x), self.b_proj(op, x), self.a_proj(op, x)

    def output(self, op, o, gate):
        return self.o_proj(op, op.Reshape(self.o_norm(op, o, gate), [0, 0, -1]))


class OlmoHybridLinearAttentionDecoderLayer(HybridDecoderLayer):
    """Pre-norm: ``x + linear_attn(norm(x))`` then ``x + mlp(norm(x))``.

    Checkpoints name the norms ``attention_layer_norm`` and ``feedforward_layer_norm``
    (transformers renames them to ``input_layernorm`` / ``post_attention_layernorm`` on load).
    """

    norm_names = ("attention_layer_norm", "feedforward_layer_norm")
    recurrent_name = "linear_attn"
    mlp_name = "mlp"

    def __init__(self, config: OlmoHybridConfig) -> None:
        super().__init__(attends=False)
        self.attention_layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.linear_attn = OlmoHybridGatedDeltaNet(config)
        self.feedforward_layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)


class OlmoHybridAttentionDecoderLayer(nn.Module):
    """OLMo 3's post-norm layer: ``x + norm(attn(x))`` then ``x + norm(mlp(x))``.

    The checkpoint names the attention-output norm ``feedforward_layer_norm`` (transformers'
    ``post_attention_layernorm``: its rename applies to every layer type).
    """

    def __init__(self, config: OlmoHybridConfig) -> None:
        super().__init__()
        self.self_attn = FullQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim) if config.rope else None,
            eps=config.rms_norm_eps,
        )
        self.feedforward_layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x, rope, bias, real, past):
        h, present = self.self_attn(op, x, rope, bias, *past)
        x = op.Add(x, self.feedforward_layer_norm(op, h))
        return op.Add(x, self.post_feedforward_layernorm(op, self.mlp(op, x))), present


class OlmoHybridModel(HybridModel):
    def __init__(self, config: OlmoHybridConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [
                OlmoHybridLinearAttentionDecoderLayer(config)
                if kind == "linear_attention"
                else OlmoHybridAttentionDecoderLayer(config)
                for kind in config.layer_kinds
            ]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = (
            make_rotary_embedding(config.rope, config.head_dim, config.max_position_embeddings)
            if config.rope is not None
            else None
        )


class OlmoHybridForCausalLM(LlamaForCausalLM):
    config_class = OlmoHybridConfig
    model_class = OlmoHybridModel

    def cache_layout(self):
        c = self.config
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        key_dim = c.linear_num_key_heads * c.linear_key_head_dim
        value_dim = c.linear_num_value_heads * c.linear_value_head_dim
        linear = [
            ("conv_state", ["batch", 2 * key_dim + value_dim, c.linear_conv_kernel_dim - 1]),
            (
                "ssm_state",
                ["batch", c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim],
            ),
        ]
        return [
            linear if kind == "linear_attention" else [("key", kv), ("value", kv)]
            for kind in c.layer_kinds
        ]

    def sanitize(self, weights: dict) -> dict:
        """Concatenate each layer's ``{q,k,v}_conv1d.weight`` into ``conv1d.weight``, as transformers
        does on load. (Its save splits the fused weight into three *equal* parts, whatever the
        q/k/v widths, so only the concatenation is meaningful.)"""
        from mobius.weights import DerivedTensor

        for i, kind in enumerate(self.config.layer_kinds):
            if kind != "linear_attention":
                continue
            prefix = f"model.layers.{i}.linear_attn."
            parts = [weights.pop(f"{prefix}{p}_conv1d.weight") for p in "qkv"]

            def fused(parts=parts):
                return np.concatenate([t.numpy() for t in parts], axis=0)

            rows = sum(t.shape[0] for t in parts)
            shape = (rows, *parts[0].shape[1:])
            weights[f"{prefix}conv1d.weight"] = DerivedTensor(fused, shape, parts[0].dtype)
        return super().sanitize(weights)


MODEL_TYPES = {"olmo_hybrid": OlmoHybridForCausalLM}
