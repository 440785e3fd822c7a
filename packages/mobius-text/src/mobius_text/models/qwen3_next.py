"""Qwen3-Next: Gated DeltaNet and gated full-attention layers, MoE MLPs with a shared expert.

``layer_types`` picks each layer's token mixer; every layer is pre-norm with
``(1 + weight)`` RMS norms (also the final norm and the attention q/k norms).

* ``full_attention``: Qwen3-MoE attention whose ``q_proj`` emits, per head, the query
  followed by an output gate of the same width; the attention output is multiplied by
  ``sigmoid(gate)`` before ``o_proj``. RoPE rotates only ``partial_rotary_factor`` of each head.
* ``linear_attention``: the Gated DeltaNet of OLMo Hybrid (``gated_delta_rule`` there), with
  the projections fused per key head: ``in_proj_qkvz`` gives, for each key head,
  ``[q (dk), k (dk), v (r*dv), z (r*dv)]`` and ``in_proj_ba`` gives ``[b (r), a (r)]``,
  ``r = value_heads / key_heads``. ``beta = sigmoid(b)``; the output norm is a plain-weight
  RMS norm gated by ``silu(z)``.

MLPs are Qwen2-MoE blocks (routed experts + sigmoid-gated shared expert) or dense, as in
Qwen3-MoE (``mlp_only_layers``, ``decoder_sparse_step``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    GatedMLP,
    Linear,
    make_rotary_embedding,
    merge_heads,
    rotary_dim,
)
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.mamba import HybridDecoderLayer, HybridModel
from mobius_text.models.olmo_hybrid import (
    GatedDeltaNet,
    GatedRMSNormAfter,
    OlmoHybridForCausalLM,
)
from mobius_text.models.qwen2_moe import SharedExpertMoeBlock, make_experts
from mobius_text.models.qwen3_moe import Qwen3MoeConfig

_LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


@dataclass
class Qwen3NextConfig(Qwen3MoeConfig):
    linear_num_key_heads: int = 1
    linear_num_value_heads: int = 1
    linear_key_head_dim: int = 1
    linear_value_head_dim: int = 1
    linear_conv_kernel_dim: int = 4
    layer_kinds: list[str] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            layer_types=[],  # attention layers are all full; the per-layer kinds follow
            layer_kinds=list(hf_config.layer_types),
            **{name: getattr(hf_config, name) for name in _LINEAR_FIELDS},
        )
        return fields


class GatedOutputAttention(Attention):
    """Attention with per-head q/k ``(1 + w)`` norms and a ``sigmoid`` output gate from ``q_proj``."""

    def __init__(self, config: Qwen3NextConfig) -> None:
        heads, head_dim = config.num_attention_heads, config.head_dim
        super().__init__(
            config.hidden_size,
            heads,
            config.num_key_value_heads,
            head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, head_dim),
        )
        self.q_proj = Linear(config.hidden_size, 2 * heads * head_dim, config.attention_bias)
        self.q_norm = GemmaRMSNorm(head_dim, config.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(head_dim, config.rms_norm_eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q_gate = op.Reshape(self.q_proj(op, x), [0, 0, -1, 2 * self.head_dim])
        q, gate = op.Split(q_gate, num_outputs=2, axis=-1, _outputs=2)  # [batch, seq, heads, hd]
        gate = op.Reshape(gate, [0, 0, -1])  # [batch, seq, heads*hd]
        q = op.Transpose(self.q_norm(op, q), perm=[0, 2, 1, 3])
        k = self.k_norm(op, self.split_heads(op, self.k_proj(op, x)))
        v = self.split_heads(op, self.v_proj(op, x))
        q, k = self.rotate(op, q, k, position_embeddings)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        return self.o_proj(op, op.Mul(merge_heads(op, y), op.Sigmoid(gate))), (
            present_key,
            present_value,
        )


class Qwen3NextGatedDeltaNet(GatedDeltaNet):
    """OLMo Hybrid's Gated DeltaNet with per-key-head fused ``in_proj_qkvz`` / ``in_proj_ba``."""

    def __init__(self, config: Qwen3NextConfig) -> None:
        super().__init__(config)
        self.norm = GatedRMSNormAfter(self.dv, config.rms_norm_eps)
        self.out_proj = Linear(self.value_dim, config.hidden_size)

    def make_projections(self, config: Qwen3NextConfig) -> None:
        hidden = config.hidden_size
        self.in_proj_qkvz = Linear(hidden, 2 * self.key_dim + 2 * self.value_dim)
        self.in_proj_ba = Linear(hidden, 2 * self.v_heads)

    def project(self, op, x):
        qkvz = op.Reshape(self.in_proj_qkvz(op, x), [0, 0, self.k_heads, -1])
        r_dv = self.ratio * self.dv
        q, k, v, z = op.Split(qkvz, [self.dk, self.dk, r_dv, r_dv], axis=-1, _outputs=4)
        ba = op.Reshape(self.in_proj_ba(op, x), [0, 0, self.k_heads, 2 * self.ratio])
        b, a = op.Split(ba, num_outputs=2, axis=-1, _outputs=2)  # [batch, seq, k_heads, r]
        flat = [op.Reshape(t, [0, 0, -1]) for t in (q, k, v, z, b, a)]
        return op.Concat(*flat[:3], axis=-1), *flat[3:]

    def output(self, op, o, gate):
        return self.out_proj(op, op.Reshape(self.norm(op, o, gate), [0, 0, -1]))


class Qwen3NextDecoderLayer(HybridDecoderLayer):
    """Pre-norm: ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``."""

    norm_names = ("input_layernorm", "post_attention_layernorm")
    recurrent_name = "linear_attn"
    mlp_name = "mlp"
    linear_attn_class = Qwen3NextGatedDeltaNet

    def __init__(self, config: Qwen3NextConfig, layer_idx: int) -> None:
        super().__init__(attends=config.layer_kinds[layer_idx] != "linear_attention")
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        if self.attends:
            self.self_attn = GatedOutputAttention(config)
        else:
            self.linear_attn = self.linear_attn_class(config)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.is_moe_layer(layer_idx):
            self.mlp = SharedExpertMoeBlock(
                *make_experts(config),
                config.hidden_size,
                config.shared_expert_intermediate_size,
                config.hidden_act,
            )
        else:
            self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)


class Qwen3NextModel(HybridModel):
    layer_class = Qwen3NextDecoderLayer

    def __init__(self, config: Qwen3NextConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [self.layer_class(config, i) for i in range(len(config.layer_kinds))]
        )
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )


class Qwen3NextForCausalLM(LlamaForCausalLM):
    """Qwen3-Next causal LM; caches: ``conv_state``/``ssm_state`` per linear layer, key/value otherwise."""

    config_class = Qwen3NextConfig
    model_class = Qwen3NextModel
    cache_layout = OlmoHybridForCausalLM.cache_layout  # same state shapes and config fields


MODEL_TYPES = {"qwen3_next": Qwen3NextForCausalLM}
