"""Kimi Linear: Kimi Delta Attention (KDA) layers beside NoPE MLA layers, DeepSeek-V3 MoE MLPs.

* ``linear_attention`` layers run KDA: the gated delta rule of
  :mod:`~mobius_text.models.olmo_hybrid` with a *per-channel* decay
  ``g = -exp(A_log) * softplus(f_b_proj(f_a_proj(x)) + dt_bias)`` ([heads, head_dim] per
  token); q, k, v each pass their own causal depthwise conv (``{q,k,v}_conv1d``, SiLU),
  q and k are L2-normalised, ``beta = sigmoid(b_proj(x))``, and the output is RMS-normalised
  per head and gated by ``sigmoid(g_b_proj(g_a_proj(x)))``. The cache holds one
  ``conv_state`` (q, k, v channels stacked) and the ``ssm_state`` [batch, heads, dk, dv].
* ``full_attention`` layers are DeepSeek MLA without any rotation (the ``k_rot`` part of
  the keys is still shared by all heads); their cache is MLA's (latent, k_rot).
* MLPs are named ``block_sparse_moe`` in checkpoints: dense gated MLPs, or DeepSeek-V3
  routing over ``experts.{e}.w1/w2/w3`` plus ``shared_experts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import Embedding, GatedMLP, Linear, RMSNorm
from mobius.components.moe import ExpertList, ExpertW123
from mobius.errors import ConfigError
from mobius_text.models.deepseek_v2 import DeepseekV2Attention, DeepseekV2MoE
from mobius_text.models.deepseek_v3 import DeepseekV3Config
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.mamba import DepthwiseConv1d, HybridDecoderLayer, HybridModel
from mobius_text.models.olmo_hybrid import GatedRMSNormAfter, _l2norm, gated_delta_rule
from mobius_text.models.qwen3_5 import _WithDefaults

KINDS = ("linear_attention", "full_attention")


def _positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive int, not {value!r}")
    return value


@dataclass
class KimiLinearConfig(DeepseekV3Config):
    linear_num_heads: int = 32
    linear_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    layer_kinds: list[str] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        # The config has no rotary settings at all: MLA runs without positions.
        fields = super().hf_fields(
            _WithDefaults(hf_config, rope_parameters={}, rope_interleave=False)
        )
        kinds = list(hf_config.layer_types)
        if len(kinds) != fields["num_hidden_layers"] or set(kinds) - set(KINDS):
            raise ConfigError(
                f"{hf_config.model_type}: layer_types needs one of {KINDS} per layer; got {kinds!r}"
            )
        fields.update(
            rope_layout="none",
            layer_types=[],
            layer_kinds=kinds,
            linear_num_heads=_positive_int("linear_num_heads", hf_config.linear_num_heads),
            linear_head_dim=_positive_int("linear_head_dim", hf_config.linear_head_dim),
            linear_conv_kernel_dim=_positive_int(
                "linear_conv_kernel_dim", hf_config.linear_conv_kernel_dim
            ),
        )
        return fields


class SigmoidGatedRMSNorm(GatedRMSNormAfter):
    """``rms_norm(x) * weight * sigmoid(gate)`` over each head's channels."""

    def forward(self, op, x, gate):
        y = op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)
        return op.Mul(y, op.Sigmoid(gate))


class KimiDeltaAttention(nn.Module):
    """KDA (see the module docstring) under the checkpoint's names.

    The forget and output gates are built by :meth:`make_gates` and read by
    :meth:`log_decay` and :meth:`output_gate`; a family with other gates overrides them.
    """

    def __init__(self, config: KimiLinearConfig) -> None:
        super().__init__()
        hidden, h, d = config.hidden_size, config.linear_num_heads, config.linear_head_dim
        dim, kernel = h * d, config.linear_conv_kernel_dim
        self.heads, self.head_dim = h, d
        self.q_proj, self.k_proj, self.v_proj = (Linear(hidden, dim) for _ in range(3))
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (
            DepthwiseConv1d(dim, kernel, bias=False) for _ in range(3)
        )
        self.dt_bias = nn.Parameter([dim])
        self.b_proj = Linear(hidden, h)
        self.make_gates(config)
        self.o_norm = SigmoidGatedRMSNorm(d, config.rms_norm_eps)
        self.o_proj = Linear(dim, hidden)

    def make_gates(self, config: KimiLinearConfig) -> None:
        hidden, h, d = config.hidden_size, self.heads, self.head_dim
        self.A_log = nn.Parameter([1, 1, h, 1])
        self.f_a_proj, self.f_b_proj = Linear(hidden, d), Linear(d, h * d)
        self.g_a_proj, self.g_b_proj = Linear(hidden, d), Linear(d, h * d)

    def log_decay(self, op, x):
        """``g`` [batch, seq, heads, head_dim]: ``-exp(A_log) * softplus(f(x) + dt_bias)``."""
        g = op.Add(self.f_b_proj(op, self.f_a_proj(op, x)), self.dt_bias)
        g = op.Reshape(g, [0, 0, self.heads, self.head_dim])
        return op.Mul(op.Neg(op.Exp(self.A_log)), op.Softplus(g))

    def output_gate(self, op, x):
        return self.g_b_proj(op, self.g_a_proj(op, x))

    def conv(self, op, proj, conv, x, state):
        """``silu(conv(proj(x)))`` [batch, seq, dim] after ``state``, and the new state."""
        y, state = conv.causal(op, state, op.Transpose(proj(op, x), perm=[0, 2, 1]))
        y = op.Transpose(y, perm=[0, 2, 1])
        return op.Mul(y, op.Sigmoid(y)), state

    def forward(self, op, x, real, conv_state, ssm_state):
        x = op.Mul(x, real)  # padding positions contribute nothing
        states = op.Split(conv_state, num_outputs=3, axis=1, _outputs=3)
        (q, sq), (k, sk), (v, sv) = (
            self.conv(op, proj, conv, x, state)
            for proj, conv, state in zip(
                (self.q_proj, self.k_proj, self.v_proj),
                (self.q_conv1d, self.k_conv1d, self.v_conv1d),
                states,
                strict=True,
            )
        )
        heads = [0, 0, self.heads, self.head_dim]
        q = op.Mul(_l2norm(op, op.Reshape(q, heads)), self.head_dim**-0.5)
        k = _l2norm(op, op.Reshape(k, heads))
        v = op.Reshape(v, heads)
        decay = op.Exp(self.log_decay(op, x))  # [batch, seq, heads, head_dim]
        beta = op.Sigmoid(self.b_proj(op, x))  # [batch, seq, heads]
        o, new_ssm = gated_delta_rule(op, ssm_state, q, k, v, decay, beta, per_channel=True)
        gate = op.Reshape(self.output_gate(op, x), heads)
        y = self.o_proj(op, op.Reshape(self.o_norm(op, o, gate), [0, 0, -1]))
        return y, (op.Concat(sq, sk, sv, axis=1), new_ssm)


class KimiLinearAttention(DeepseekV2Attention):
    """MLA with no positional encoding: ``k_rot`` and ``q_rot`` go in unrotated."""

    def forward(self, op, x, rope, bias, past_latent, past_k_rot):
        return super().forward(op, x, (None, None), bias, past_latent, past_k_rot)


class KimiLinearMoE(DeepseekV2MoE):
    """DeepSeek-V3 routing over ``experts.{e}.w1/w2/w3`` (the checkpoint's names)."""

    def __init__(self, config: KimiLinearConfig) -> None:
        super().__init__(config)
        c = config
        self.experts = ExpertList(
            [
                ExpertW123(c.hidden_size, c.moe_intermediate_size, c.hidden_act)
                for _ in range(c.n_routed_experts)
            ]
        )


class KimiLinearDecoderLayer(HybridDecoderLayer):
    norm_names = ("input_layernorm", "post_attention_layernorm")
    recurrent_name = "self_attn"  # both mixers are named self_attn in checkpoints
    mlp_name = "block_sparse_moe"

    def __init__(self, config: KimiLinearConfig, layer_idx: int) -> None:
        super().__init__(attends=config.layer_kinds[layer_idx] == "full_attention")
        c = config
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = KimiLinearAttention(c) if self.attends else KimiDeltaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.mlp_layer_types[layer_idx] == "sparse":
            self.block_sparse_moe = KimiLinearMoE(c)
        else:
            self.block_sparse_moe = GatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act)


class KimiLinearModel(HybridModel):
    def __init__(self, config: KimiLinearConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [KimiLinearDecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class KimiLinearForCausalLM(LlamaForCausalLM):
    config_class = KimiLinearConfig
    model_class = KimiLinearModel

    def cache_layout(self):
        c = self.config
        dim = c.linear_num_heads * c.linear_head_dim
        linear = [
            ("conv_state", ["batch", 3 * dim, c.linear_conv_kernel_dim - 1]),
            ("ssm_state", ["batch", c.linear_num_heads, c.linear_head_dim, c.linear_head_dim]),
        ]
        mla = [
            ("key", ["batch", 1, "past_sequence", c.kv_lora_rank]),
            ("value", ["batch", 1, "past_sequence", c.qk_rope_head_dim]),
        ]
        return [linear if kind == "linear_attention" else mla for kind in c.layer_kinds]


MODEL_TYPES = {"kimi_linear": KimiLinearForCausalLM}
