"""LFM3: LFM2's short-convolution and attention layers, with sliding attention, gated heads and
sandwich norms.

What differs from LFM2:

- three layer types: ``conv`` (LFM2's gated short convolution), ``sliding_attention``
  (windowed, default RoPE) and ``full_attention`` ("proportional" RoPE: a partial set of
  frequencies, zeros after); each attention type has its own ``rope_parameters``;
- attention is Qwen3's (``q_norm``/``k_norm`` per head, ``o_proj``), its output scaled per
  head by ``sigmoid(gate_proj(x))`` (``use_attention_gate``; checkpoints name it
  ``gate_proj``, transformers' module ``g_proj``: both load);
- each branch's output is RMS-normed before the residual add (``post_operator_norm``,
  ``post_ffn_norm``: ``use_sandwich_norm``);
- the MLP width is ``intermediate_size`` as given (no LFM2 width adjustment).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import Embedding, Linear, RMSNorm
from mobius.config import RopeConfig
from mobius_text.models._rope_by_type import RotaryByLayerType, rope_by_layer_type_fields
from mobius_text.models.gemma4_text import make_rope
from mobius_text.models.lfm2 import Lfm2Config, Lfm2ForCausalLM, Lfm2MLP, Lfm2ShortConv
from mobius_text.models.mamba import HybridDecoderLayer, HybridModel, real_token_scale
from mobius_text.models.qwen import QKNormAttention

ATTENTION_KINDS = ("full_attention", "sliding_attention")


@dataclass
class Lfm3Config(Lfm2Config):
    use_sandwich_norm: bool = True
    use_attention_gate: bool = True
    # RoPE settings of each attention layer type
    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super(Lfm2Config, cls).hf_fields(hf_config)  # LFM2's width rule is not LFM3's
        kinds = [kind for kind in fields["layer_types"] if kind != "conv"]
        unknown = set(fields["layer_types"]) - {"conv", *ATTENTION_KINDS}
        if unknown:
            raise ValueError(f"unknown LFM3 layer types {sorted(unknown)}")
        fields.update(
            **rope_by_layer_type_fields(hf_config, kinds),
            rms_norm_eps=hf_config.norm_eps,
            conv_L_cache=hf_config.conv_L_cache,
            conv_bias=bool(hf_config.conv_bias),
            use_sandwich_norm=bool(hf_config.use_sandwich_norm),
            use_attention_gate=bool(hf_config.use_attention_gate),
        )
        return fields


class Lfm3Attention(QKNormAttention):
    """Qwen3's attention, each head's output scaled by ``sigmoid(gate_proj(x))`` when gated."""

    def __init__(self, config: Lfm3Config, rotary: int) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary,
            eps=config.rms_norm_eps,
        )
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.gate_proj = Linear(hidden, heads) if config.use_attention_gate else None

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        q, k = self.rotate(op, q, k, position_embeddings)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [batch, seq, heads, head_dim]
        if self.gate_proj is not None:
            y = op.Mul(y, op.Unsqueeze(op.Sigmoid(self.gate_proj(op, x)), [-1]))
        y = op.Reshape(y, op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, y), (present_key, present_value)


class Lfm3DecoderLayer(HybridDecoderLayer):
    """``x + post_norm(mixer(norm(x)))``, then ``x + post_norm(mlp(norm(x)))``."""

    def __init__(self, config: Lfm3Config, kind: str, rotary: int) -> None:
        super().__init__(kind != "conv")
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.operator_norm = RMSNorm(hidden, eps)
        if self.attends:
            self.self_attn = Lfm3Attention(config, rotary)
        else:
            self.conv = Lfm2ShortConv(config)
        self.ffn_norm = RMSNorm(hidden, eps)
        self.feed_forward = Lfm2MLP(hidden, config.intermediate_size)
        sandwich = config.use_sandwich_norm
        self.post_operator_norm = RMSNorm(hidden, eps) if sandwich else None
        self.post_ffn_norm = RMSNorm(hidden, eps) if sandwich else None

    def forward(self, op, x, rope, bias, real, past):
        h = self.operator_norm(op, x)
        if self.attends:
            h, present = self.self_attn(op, h, rope, bias, *past)
        else:
            h, present = self.conv(op, h, real, *past)
        if self.post_operator_norm is not None:
            h = self.post_operator_norm(op, h)
        x = op.Add(x, h)
        h = self.feed_forward(op, self.ffn_norm(op, x))
        if self.post_ffn_norm is not None:
            h = self.post_ffn_norm(op, h)
        return op.Add(x, h), present


class Lfm3Model(RotaryByLayerType, HybridModel):
    """Embeddings, the layers with their type's RoPE and mask, ``embedding_norm`` (the final norm)."""

    def __init__(self, config: Lfm3Config) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layer_kinds = sorted(config.rope_by_layer_type)
        ropes = {
            kind: make_rope(rope, config.head_dim, config.max_position_embeddings)
            for kind, rope in config.rope_by_layer_type.items()
        }
        self.rotary_emb = nn.ModuleList([ropes[kind][0] for kind in self.layer_kinds])
        self.layers = nn.ModuleList(
            [
                Lfm3DecoderLayer(config, kind, ropes[kind][1] if kind in ropes else 0)
                for kind in config.layer_types
            ]
        )
        self.embedding_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        ropes, biases = self.ropes_and_biases(op, input_ids, attention_mask, position_ids, x.dtype)
        real = real_token_scale(op, attention_mask, input_ids, x)
        presents = []
        for kind, layer, layer_past in zip(self.config.layer_types, self.layers, past, strict=True):
            x, present = layer(op, x, ropes.get(kind), biases.get(kind), real, layer_past)
            presents.append(present)
        return self.embedding_norm(op, x), presents


class Lfm3ForCausalLM(Lfm2ForCausalLM):
    config_class = Lfm3Config
    model_class = Lfm3Model

    def sanitize(self, weights: dict) -> dict:
        """transformers' in-memory ``g_proj`` under the checkpoints' ``gate_proj``."""
        gate = ".self_attn.g_proj."
        renamed = {k.replace(gate, ".self_attn.gate_proj."): v for k, v in weights.items()}
        return super().sanitize(renamed)


MODEL_TYPES = {"lfm3": Lfm3ForCausalLM}
