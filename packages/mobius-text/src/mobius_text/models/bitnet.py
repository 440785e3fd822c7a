"""BitNet b1.58 (unpacked weights): Llama with an RMS norm before ``o_proj`` and before
``down_proj``, and a ReLU² gated MLP."""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Attention, GatedMLP, RMSNorm, apply_rotary, merge_heads
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class BitNetConfig(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        if getattr(hf_config, "quantization_config", None):
            raise ValueError(
                "packed BitNet checkpoints (with a quantization_config) are not supported; "
                "use a checkpoint with unpacked floating-point weights"
            )
        return {**super().hf_fields(hf_config), "mlp_bias": False}


class BitNetAttention(Attention):
    """Attention whose merged heads are RMS-normalised (``attn_sub_norm``) before ``o_proj``."""

    def __init__(self, *args, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.attn_sub_norm = RMSNorm(self.num_heads * self.head_dim, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, self.attn_sub_norm(op, y)), (present_key, present_value)


class BitNetMLP(GatedMLP):
    """``down(norm(act(gate(x)) * up(x)))``: a gated MLP with ``ffn_sub_norm`` before ``down_proj``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, eps: float) -> None:
        super().__init__(hidden_size, intermediate_size, act)
        self.ffn_sub_norm = RMSNorm(intermediate_size, eps)

    def forward(self, op, x):
        h = op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x))
        return self.down_proj(op, self.ffn_sub_norm(op, h))


class BitNetModel(LlamaModel):
    def make_attention(self, config: BitNetConfig, layer_idx: int) -> Attention:
        return BitNetAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            eps=config.rms_norm_eps,
        )

    def make_layer(self, config: BitNetConfig, layer_idx: int):
        layer = super().make_layer(config, layer_idx)
        layer.mlp = BitNetMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, config.rms_norm_eps
        )
        return layer


class BitNetForCausalLM(LlamaForCausalLM):
    """BitNet causal LM."""

    config_class = BitNetConfig
    model_class = BitNetModel


MODEL_TYPES = {"bitnet": BitNetForCausalLM}
