"""Falcon-H1: attention and a Mamba-2 mixer side by side in every layer, with µP multipliers.

Each layer normalises its input once and feeds it to both branches:
``x + ssm_out * mamba(h) + attn_out * attention(attn_in * h)``, then a gated
MLP. µP multipliers scale the embeddings, the logits, the keys, the MLP gate
and output, the mixer input and each section of the mixer's ``in_proj`` output
(``ssm_multipliers`` for z, x, B, C and dt: transformers' ``mup_vector``, a
buffer computed from the config, not stored in checkpoints). The mixer width is
``mamba_d_ssm`` (not necessarily ``mamba_expand * hidden``), and its gated RMS
norm is optional and may normalise before gating. Every layer caches both
``key``/``value`` and ``conv_state``/``ssm_state``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    make_rotary_embedding,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import HybridModel
from mobius_text.models.mamba2 import GatedRMSNorm, Mamba2Config, Mamba2Mixer


@dataclass
class FalconH1Config(LlamaConfig):
    mamba: Mamba2Config | None = None
    embedding_multiplier: float = 1.0
    lm_head_multiplier: float = 1.0
    mlp_multipliers: tuple[float, float] = (1.0, 1.0)
    key_multiplier: float = 1.0
    attention_in_multiplier: float = 1.0
    attention_out_multiplier: float = 1.0
    ssm_multipliers: tuple[float, ...] = (1.0,) * 5
    ssm_in_multiplier: float = 1.0
    ssm_out_multiplier: float = 1.0
    mamba_rms_norm: bool = False
    mamba_norm_before_gate: bool = True
    projectors_bias: bool = False
    layer_types: list[str] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        if hf_config.hidden_act != "silu":  # the Mamba-2 mixer's convolution uses hidden_act
            raise ValueError(f"falcon_h1 with hidden_act={hf_config.hidden_act!r}")
        inner = hf_config.mamba_d_ssm or int(hf_config.mamba_expand * hf_config.hidden_size)
        fields.update(
            layer_types=[],  # HF maps layer_types to "hybrid": every layer attends (full causal)
            sliding_window=None,
            head_dim=hf_config.hidden_size // hf_config.num_attention_heads,
            embedding_multiplier=float(hf_config.embedding_multiplier),
            lm_head_multiplier=float(hf_config.lm_head_multiplier),
            mlp_multipliers=tuple(hf_config.mlp_multipliers),
            key_multiplier=float(hf_config.key_multiplier),
            attention_in_multiplier=float(hf_config.attention_in_multiplier),
            attention_out_multiplier=float(hf_config.attention_out_multiplier),
            ssm_multipliers=tuple(hf_config.ssm_multipliers),
            ssm_in_multiplier=float(hf_config.ssm_in_multiplier),
            ssm_out_multiplier=float(hf_config.ssm_out_multiplier),
            mamba_rms_norm=bool(hf_config.mamba_rms_norm),
            mamba_norm_before_gate=bool(hf_config.mamba_norm_before_gate),
            projectors_bias=bool(hf_config.projectors_bias),
            mamba=Mamba2Config.from_hybrid(hf_config, intermediate_size=inner),
        )
        return fields


def _mup_vector(config: FalconH1Config) -> np.ndarray:
    """Per-channel scale of ``in_proj``'s output: z, x, B, C, dt sections (transformers' ``mup_vector``)."""
    m = config.mamba
    group_dim = m.n_groups * m.state_size
    widths = (m.intermediate_size, m.intermediate_size, group_dim, group_dim, m.num_heads)
    return np.concatenate(
        [
            np.full(w, s, dtype=np.float32)
            for w, s in zip(widths, config.ssm_multipliers, strict=True)
        ]
    )


class ScaledInProj(Linear):
    """``(x * in_multiplier) @ W.T (+ b)``, then scaled per output channel by the µP vector."""

    def __init__(self, in_features: int, bias: bool, in_multiplier: float, mup: np.ndarray):
        super().__init__(in_features, len(mup), bias)
        self.in_multiplier, self.mup = in_multiplier, mup

    def forward(self, op, x):
        y = super().forward(op, op.Mul(x, op.CastLike(self.in_multiplier, x)))
        return op.Mul(y, op.CastLike(op.Constant(value=ir.tensor(self.mup)), y))


class NormThenGate(GatedRMSNorm):
    """``group_rms_norm(x) * weight * silu(gate)`` (``mamba_norm_before_gate``)."""

    def forward(self, op, x, gate):
        grouped = op.Reshape(x, op.Concat(op.Shape(x, end=-1), [self.groups, -1], axis=0))
        mean_square = op.ReduceMean(op.Mul(grouped, grouped), [-1], keepdims=1)
        grouped = op.Mul(grouped, op.Reciprocal(op.Sqrt(op.Add(mean_square, self.eps))))
        y = op.Mul(op.Reshape(grouped, op.Shape(x)), self.weight)
        return op.Mul(y, op.Mul(gate, op.Sigmoid(gate)))


class SiluGate(nn.Module):
    """``x * silu(gate)``: the mixer output when ``mamba_rms_norm`` is off (no weights)."""

    def forward(self, op, x, gate):
        return op.Mul(x, op.Mul(gate, op.Sigmoid(gate)))


class FalconH1Mixer(Mamba2Mixer):
    """Mamba-2 with µP-scaled ``in_proj``, an optional gated norm and ``projectors_bias`` out."""

    def __init__(self, config: FalconH1Config) -> None:
        m = config.mamba
        super().__init__(m)
        self.in_proj = ScaledInProj(
            m.hidden_size, m.use_bias, config.ssm_in_multiplier, _mup_vector(config)
        )
        if not config.mamba_rms_norm:
            self.norm = SiluGate()
        elif config.mamba_norm_before_gate:
            self.norm = NormThenGate(m.intermediate_size, m.n_groups, m.layer_norm_epsilon)
        self.out_proj = Linear(m.intermediate_size, m.hidden_size, config.projectors_bias)


class FalconH1Attention(Attention):
    """Llama attention whose keys are scaled by ``key_multiplier`` (before RoPE, which is linear)."""

    def __init__(self, config: FalconH1Config) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )
        self.key_multiplier = config.key_multiplier

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)
        return q, op.Mul(k, op.CastLike(self.key_multiplier, k)), v


class FalconH1MLP(GatedMLP):
    """``down(up(x) * act(gate(x) * gate_mult)) * down_mult``."""

    def __init__(self, config: FalconH1Config) -> None:
        super().__init__(
            config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
        )
        self.gate_multiplier, self.down_multiplier = config.mlp_multipliers

    def forward(self, op, x):
        gate = self.gate_proj(op, x)
        gate = self.act(op, op.Mul(gate, op.CastLike(self.gate_multiplier, gate)))
        y = self.down_proj(op, op.Mul(self.up_proj(op, x), gate))
        return op.Mul(y, op.CastLike(self.down_multiplier, y))


def _scale(op, x, factor: float):
    return x if factor == 1.0 else op.Mul(x, op.CastLike(factor, x))


class FalconH1DecoderLayer(nn.Module):
    def __init__(self, config: FalconH1Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mamba = FalconH1Mixer(config)
        self.self_attn = FalconH1Attention(config)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.feed_forward = FalconH1MLP(config)
        self.config = config

    def forward(self, op, x, rope, bias, real, past):
        past_key, past_value, conv_state, ssm_state = past
        c = self.config
        h = self.input_layernorm(op, x)
        m, (conv_state, ssm_state) = self.mamba(op, h, real, conv_state, ssm_state)
        a, (key, value) = self.self_attn(
            op, _scale(op, h, c.attention_in_multiplier), rope, bias, past_key, past_value
        )
        mixed = op.Add(
            _scale(op, m, c.ssm_out_multiplier), _scale(op, a, c.attention_out_multiplier)
        )
        x = op.Add(x, mixed)
        x = op.Add(x, self.feed_forward(op, self.pre_ff_layernorm(op, x)))
        return x, (key, value, conv_state, ssm_state)


class FalconH1Model(HybridModel):
    norm_name = "final_layernorm"

    def __init__(self, config: FalconH1Config) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [FalconH1DecoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.final_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )
        self.embedding_multiplier = config.embedding_multiplier

    def embed(self, op, input_ids):
        return _scale(op, self.embed_tokens(op, input_ids), self.embedding_multiplier)


class FalconH1ForCausalLM(LlamaForCausalLM):
    config_class = FalconH1Config
    model_class = FalconH1Model

    def cache_layout(self):
        c, m = self.config, self.config.mamba
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        layer = [("key", kv), ("value", kv), *m.state_layout()]
        return [layer] * c.num_hidden_layers

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        logits, presents = super().forward(op, input_ids, attention_mask, position_ids, past)
        return _scale(op, logits, self.config.lm_head_multiplier), presents


MODEL_TYPES = {"falcon_h1": FalconH1ForCausalLM}
