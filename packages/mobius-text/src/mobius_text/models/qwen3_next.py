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
    TiedLMHead,
    apply_rotary,
    attention_bias,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.model import Model
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.mamba import DepthwiseConv1d
from mobius_text.models.olmo_hybrid import (
    GatedRMSNormAfter,
    OlmoHybridForCausalLM,
    _l2norm,
    gated_delta_rule,
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
        cos, sin = position_embeddings
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), [0, 0, -1])
        return self.o_proj(op, op.Mul(y, op.Sigmoid(gate))), (present_key, present_value)


class Qwen3NextGatedDeltaNet(nn.Module):
    """Gated DeltaNet with per-key-head fused ``in_proj_qkvz`` / ``in_proj_ba`` projections."""

    def __init__(self, config: Qwen3NextConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.k_heads, self.v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.ratio = self.v_heads // self.k_heads  # value heads per key head
        self.key_dim, self.value_dim = self.k_heads * self.dk, self.v_heads * self.dv
        self.make_projections(hidden)
        self.conv1d = DepthwiseConv1d(
            2 * self.key_dim + self.value_dim, config.linear_conv_kernel_dim, bias=False
        )
        self.A_log = nn.Parameter([self.v_heads])
        self.dt_bias = nn.Parameter([self.v_heads])
        self.norm = GatedRMSNormAfter(self.dv, config.rms_norm_eps)
        self.out_proj = Linear(self.value_dim, hidden)
        self.kernel = config.linear_conv_kernel_dim

    def make_projections(self, hidden: int) -> None:
        self.in_proj_qkvz = Linear(hidden, 2 * self.key_dim + 2 * self.value_dim)
        self.in_proj_ba = Linear(hidden, 2 * self.v_heads)

    def project(self, op, x):
        """``[q; k; v]`` [batch, seq, conv_dim], ``z`` [batch, seq, value_dim], ``b``, ``a`` [batch, seq, v_heads]."""
        qkvz = op.Reshape(self.in_proj_qkvz(op, x), [0, 0, self.k_heads, -1])
        r_dv = self.ratio * self.dv
        q, k, v, z = op.Split(qkvz, [self.dk, self.dk, r_dv, r_dv], axis=-1, _outputs=4)
        ba = op.Reshape(self.in_proj_ba(op, x), [0, 0, self.k_heads, 2 * self.ratio])
        b, a = op.Split(ba, num_outputs=2, axis=-1, _outputs=2)  # [batch, seq, k_heads, r]
        flat = [op.Reshape(t, [0, 0, -1]) for t in (q, k, v, z, b, a)]
        return op.Concat(*flat[:3], axis=-1), *flat[3:]

    def key_heads(self, op, x):
        """[batch, seq, k_heads*dk] → [batch, seq, v_heads, dk], each key head repeated in place."""
        x = op.Unsqueeze(op.Reshape(x, [0, 0, self.k_heads, self.dk]), [3])
        x = op.Expand(x, [1, 1, 1, self.ratio, 1])
        return op.Reshape(x, [0, 0, self.v_heads, self.dk])

    def forward(self, op, x, real, conv_state, ssm_state):
        x = op.Mul(x, real)  # padding positions contribute nothing
        qkv, z, b, a = self.project(op, x)
        window = op.Concat(conv_state, op.Transpose(qkv, perm=[0, 2, 1]), axis=2)
        new_conv_state = op.Slice(window, [-(self.kernel - 1)], [2**62], [2])
        qkv = op.Transpose(self.conv1d(op, window), perm=[0, 2, 1])  # [batch, seq, conv_dim]
        qkv = op.Mul(qkv, op.Sigmoid(qkv))
        q, k, v = op.Split(qkv, [self.key_dim, self.key_dim, self.value_dim], axis=-1, _outputs=3)
        q = op.Mul(_l2norm(op, self.key_heads(op, q)), self.dk**-0.5)
        k = _l2norm(op, self.key_heads(op, k))
        v = op.Reshape(v, [0, 0, self.v_heads, self.dv])
        g = op.Mul(op.Neg(op.Exp(self.A_log)), op.Softplus(op.Add(a, self.dt_bias)))
        o, new_ssm_state = gated_delta_rule(op, ssm_state, q, k, v, op.Exp(g), op.Sigmoid(b))
        gate = op.Reshape(z, [0, 0, self.v_heads, self.dv])
        o = op.Reshape(self.norm(op, o, gate), [0, 0, -1])  # [batch, seq, value_dim]
        return self.out_proj(op, o), (new_conv_state, new_ssm_state)


class Qwen3NextDecoderLayer(nn.Module):
    """Pre-norm: ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``."""

    linear_attn_class = Qwen3NextGatedDeltaNet

    def __init__(self, config: Qwen3NextConfig, layer_idx: int) -> None:
        super().__init__()
        self.linear = config.layer_kinds[layer_idx] == "linear_attention"
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        if self.linear:
            self.linear_attn = self.linear_attn_class(config)
        else:
            self.self_attn = GatedOutputAttention(config)
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

    def forward(self, op, x, real, rope, bias, *past):
        h = self.input_layernorm(op, x)
        if self.linear:
            h, present = self.linear_attn(op, h, real, *past)
        else:
            h, present = self.self_attn(op, h, rope, bias, *past)
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x))), present


class Qwen3NextModel(nn.Module):
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

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        seq = op.Shape(input_ids, start=1, end=2)
        bias = attention_bias(op, attention_mask, op.Squeeze(seq, [0]), x.dtype)
        current = op.Slice(attention_mask, op.Neg(seq), [2**62], [1])
        real = op.Unsqueeze(op.CastLike(current, x), [-1])  # [batch, seq, 1]
        rope = self.rotary_emb(op, position_ids)
        presents = []
        for layer, layer_past in zip(self.layers, past, strict=True):
            x, present = layer(op, x, real, rope, bias, *layer_past)
            presents.append(present)
        return self.norm(op, x), presents


class Qwen3NextForCausalLM(Model):
    """Qwen3-Next causal LM; caches: ``conv_state``/``ssm_state`` per linear layer, key/value otherwise."""

    config_class = Qwen3NextConfig
    model_class = Qwen3NextModel
    cache_layout = OlmoHybridForCausalLM.cache_layout  # same state shapes and config fields

    def __init__(self, config: Qwen3NextConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)
        if config.tie_word_embeddings:
            self.lm_head = TiedLMHead(self.model.embed_tokens)
        else:
            self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past)
        return self.lm_head(op, hidden), presents

    def sanitize(self, weights: dict) -> dict:
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return weights


MODEL_TYPES = {"qwen3_next": Qwen3NextForCausalLM}
