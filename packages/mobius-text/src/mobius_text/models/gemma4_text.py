"""Gemma 4 (text, dense): Gemma 3n's attention and per-layer input embeddings on a plain
sandwich-norm residual stream (no AltUp, no LAuReL).

- Full-attention layers may have their own head_dim and kv-head count
  (``global_head_dim``, ``num_global_key_value_heads``) and, with
  ``attention_k_eq_v``, no ``v_proj``: values are the raw keys, RMS-normalised.
- Full layers default to "proportional" RoPE: the first ``partial_rotary_factor``
  of the frequencies rotate (with exponents over the whole head_dim), the rest are
  zero, so the rotation spans the full head.
- The last ``num_kv_shared_layers`` layers reuse the present K/V of the last earlier
  layer of their type (no cache of their own); with ``use_double_wide_mlp`` their
  MLP is twice as wide.
- Every layer ends by multiplying the stream by its checkpointed ``layer_scalar``.

The MoE block (``enable_moe_block``) is not built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from onnxscript import nn

from mobius.components import (
    Attention,
    GatedMLP,
    Linear,
    RMSNorm,
    RotaryEmbedding,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models.gemma import ScaledEmbedding
from mobius_text.models.gemma2 import SoftcappedLogits
from mobius_text.models.gemma3n_text import (
    Gemma3nSharedKVAttention,
    Gemma3nTextModel,
    PerLayerEmbedding,
    rms_normalize,
)
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class Gemma4TextConfig(ArchitectureConfig):
    # ``rope`` (inherited) serves full-attention layers; sliding layers use this one.
    local_rope: RopeConfig = field(default_factory=RopeConfig)
    layer_head_dims: list[int] = field(default_factory=list)
    layer_kv_heads: list[int] = field(default_factory=list)
    # Per layer: None (own cache), "store" (own cache, shared onwards) or "reuse".
    kv_sharing_modes: list[str | None] = field(default_factory=list)
    attention_k_eq_v: bool = False
    use_double_wide_mlp: bool = False
    final_logit_softcapping: float | None = None
    vocab_size_per_layer_input: int = 0
    hidden_size_per_layer_input: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        if getattr(hf_config, "enable_moe_block", False):
            raise NotImplementedError("Gemma 4 with enable_moe_block is not supported")
        if getattr(hf_config, "use_bidirectional_attention", None):
            raise ValueError("Gemma 4 with use_bidirectional_attention is not a causal LM")
        # The global head_dim / kv-head values are the sliding layers'; per-layer values
        # are read below. transformers guards the global ones behind this flag.
        allowed = hf_config.allow_global_per_layer_attribute_access
        hf_config.allow_global_per_layer_attribute_access = True
        try:
            fields = super().hf_fields(hf_config)
        finally:
            hf_config.allow_global_per_layer_attribute_access = allowed
        params = hf_config.rope_parameters  # one dict per layer type
        layers = [hf_config.per_layer_config[i] for i in range(hf_config.num_hidden_layers)]
        return {
            **fields,
            "hidden_act": hf_config.hidden_activation,
            "rope": RopeConfig.from_hf(SimpleNamespace(rope_parameters=params["full_attention"])),
            "local_rope": RopeConfig.from_hf(
                SimpleNamespace(rope_parameters=params["sliding_attention"])
            ),
            "layer_head_dims": [layer.head_dim for layer in layers],
            "layer_kv_heads": [layer.num_key_value_heads for layer in layers],
            "kv_sharing_modes": list(hf_config.kv_sharing_modes),
            "attention_k_eq_v": bool(hf_config.attention_k_eq_v),
            "use_double_wide_mlp": bool(hf_config.use_double_wide_mlp),
            "final_logit_softcapping": hf_config.final_logit_softcapping,
            "vocab_size_per_layer_input": hf_config.vocab_size_per_layer_input,
            "hidden_size_per_layer_input": hf_config.hidden_size_per_layer_input or 0,
        }

    def head_dim_of(self, kind: str) -> int:
        return self.layer_head_dims[self.layer_types.index(kind)]


def proportional_inv_freq(rope: RopeConfig, head_dim: int) -> np.ndarray:
    """transformers' "proportional" RoPE: rotated frequencies, then zeros, over ``head_dim / 2``."""
    angles = int(rope.partial_rotary_factor * head_dim // 2)
    exponents = np.arange(0, 2 * angles, 2).astype(np.float32) / np.float32(head_dim)
    rotated = (1.0 / (np.float32(rope.theta) ** exponents)).astype(np.float32)
    inv_freq = np.concatenate([rotated, np.zeros(head_dim // 2 - angles, np.float32)])
    return (inv_freq / np.float32(rope.factor or 1.0)).astype(np.float32)


def make_rope(rope: RopeConfig, head_dim: int, max_positions: int):
    """The rotary module and the number of channels it rotates."""
    if rope.rope_type == "proportional":
        return RotaryEmbedding(proportional_inv_freq(rope, head_dim)), head_dim
    return make_rotary_embedding(rope, head_dim, max_positions), rotary_dim(rope, head_dim)


class Gemma4Attention(Attention):
    """Unscaled attention, normed q/k, scale-free normed values; ``k_eq_v`` drops ``v_proj``."""

    # KV-sharing layers read this cache with queries rotated by HF position.
    rotary_in_kernel = False

    def __init__(self, config: Gemma4TextConfig, layer_idx: int, rotary: int, k_eq_v: bool):
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.layer_kv_heads[layer_idx],
            config.layer_head_dims[layer_idx],
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary,
            scale=1.0,
        )
        if k_eq_v:
            self.v_proj = None
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.eps = config.rms_norm_eps

    def project_qkv(self, op, x):
        q = self.split_heads(op, self.q_proj(op, x))  # [batch, heads, seq, head_dim]
        k = self.split_heads(op, self.k_proj(op, x))
        v = self.split_heads(op, self.v_proj(op, x)) if self.v_proj is not None else k
        return self.q_norm(op, q), self.k_norm(op, k), rms_normalize(op, v, self.eps)


class Gemma4DecoderLayer(nn.Module):
    """Sandwich-normed attention and MLP, the per-layer input residual, then ``layer_scalar``."""

    def __init__(self, config: Gemma4TextConfig, layer_idx: int, rotary: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        kind = config.layer_types[layer_idx]
        self.shared = config.kv_sharing_modes[layer_idx] == "reuse"
        if self.shared:
            self.self_attn = Gemma3nSharedKVAttention(
                hidden,
                config.num_attention_heads,
                config.layer_head_dims[layer_idx],
                config.attention_bias,
                eps,
                rotary,
            )
        else:
            k_eq_v = config.attention_k_eq_v and kind != "sliding_attention"
            self.self_attn = Gemma4Attention(config, layer_idx, rotary, k_eq_v)
        wide = 2 if config.use_double_wide_mlp and self.shared else 1
        self.mlp = GatedMLP(hidden, config.intermediate_size * wide, config.hidden_act)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.pre_feedforward_layernorm = RMSNorm(hidden, eps)
        self.post_feedforward_layernorm = RMSNorm(hidden, eps)
        per_layer = config.hidden_size_per_layer_input
        if per_layer:
            self.per_layer_input_gate = Linear(hidden, per_layer)
            self.per_layer_projection = Linear(per_layer, hidden)
            self.post_per_layer_input_norm = RMSNorm(hidden, eps)
            self.act = get_activation(config.hidden_act)
        self.per_layer = bool(per_layer)
        self.layer_scalar = nn.Parameter([1])  # a checkpointed buffer in HF

    def forward(self, op, x, position_embeddings, bias, per_layer_input, kv):
        """``kv``: the past (key, value), or the shared present one for a shared layer."""
        normed = self.input_layernorm(op, x)
        if self.shared:
            h, present = self.self_attn(op, normed, position_embeddings, bias, *kv), None
        else:
            h, present = self.self_attn(op, normed, position_embeddings, bias, *kv)
        x = op.Add(x, self.post_attention_layernorm(op, h))
        h = self.mlp(op, self.pre_feedforward_layernorm(op, x))
        x = op.Add(x, self.post_feedforward_layernorm(op, h))
        if self.per_layer:
            gate = op.Mul(self.act(op, self.per_layer_input_gate(op, x)), per_layer_input)
            x = op.Add(x, self.post_per_layer_input_norm(op, self.per_layer_projection(op, gate)))
        return op.Mul(x, self.layer_scalar), present


class Gemma4TextModel(nn.Module):
    """Embeddings, per-layer inputs, layers and the final norm (HF ``model.*``)."""

    def __init__(self, config: Gemma4TextConfig) -> None:
        super().__init__()
        self.config = config
        hidden, layers = config.hidden_size, config.num_hidden_layers
        kinds = dict.fromkeys(config.layer_types)
        ropes = {"full_attention": config.rope, "sliding_attention": config.local_rope}
        tables = {
            kind: make_rope(ropes[kind], config.head_dim_of(kind), config.max_position_embeddings)
            for kind in kinds
        }
        # Held outside the module tree: rotary tables carry no parameters.
        object.__setattr__(self, "rotary", {kind: table for kind, (table, _) in tables.items()})
        self.embed_tokens = ScaledEmbedding(config.vocab_size, hidden)
        self.layers = nn.ModuleList(
            [
                Gemma4DecoderLayer(config, i, tables[kind][1])
                for i, kind in enumerate(config.layer_types)
            ]
        )
        self.norm = RMSNorm(hidden, config.rms_norm_eps)
        per_layer = config.hidden_size_per_layer_input
        if per_layer:
            self.embed_tokens_per_layer = PerLayerEmbedding(
                config.vocab_size_per_layer_input, layers, per_layer
            )
            self.per_layer_model_projection = Linear(hidden, layers * per_layer)
            self.per_layer_projection_norm = RMSNorm(per_layer, config.rms_norm_eps)

    per_layer_inputs = Gemma3nTextModel.per_layer_inputs  # the same tables and projection

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        per_layer_inputs = (
            self.per_layer_inputs(op, input_ids, x) if c.hidden_size_per_layer_input else None
        )
        rope = {kind: table(op, position_ids) for kind, table in self.rotary.items()}
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        windows = {"full_attention": None, "sliding_attention": c.sliding_window}
        biases = {
            kind: attention_bias(op, attention_mask, seq_len, x.dtype, windows[kind])
            for kind in rope
        }
        shared_kv, presents = {}, []
        for i, (layer, kind, mode, past) in enumerate(
            zip(self.layers, c.layer_types, c.kv_sharing_modes, past_key_values, strict=True)
        ):
            per_layer_input = None
            if per_layer_inputs is not None:
                per_layer_input = op.Gather(per_layer_inputs, op.Constant(value_int=i), axis=2)
            kv = shared_kv[kind] if mode == "reuse" else past
            x, present = layer(op, x, rope[kind], biases[kind], per_layer_input, kv)
            presents.append(present if present is not None else ())
            if mode == "store":
                shared_kv[kind] = present
        return self.norm(op, x), presents


class Gemma4ForCausalLM(SoftcappedLogits, LlamaForCausalLM):
    """Gemma 4 text causal LM; KV-sharing layers have no cache tensors."""

    config_class = Gemma4TextConfig
    model_class = Gemma4TextModel

    def cache_layout(self):
        c = self.config
        return [
            []
            if mode == "reuse"
            else [
                ("key", ["batch", kv_heads, "past_sequence", head_dim]),
                ("value", ["batch", kv_heads, "past_sequence", head_dim]),
            ]
            for mode, kv_heads, head_dim in zip(
                c.kv_sharing_modes, c.layer_kv_heads, c.layer_head_dims, strict=True
            )
        ]


MODEL_TYPES = {"gemma4_text": Gemma4ForCausalLM}
