"""Apertus: per-head q/k RMSNorm, renamed pre-norms, and a non-gated MLP with the xIELU activation.

The layer norms are called ``attention_layernorm`` / ``feedforward_layernorm``.
The MLP is ``down(xielu(up(x)))``; xIELU has learned scalars ``alpha_p``, ``alpha_n``
(stored before softplus) and checkpointed constants ``beta``, ``eps``:

    alpha_p = softplus(alpha_p);  alpha_n = beta + softplus(alpha_n)
    xielu(x) = alpha_p x² + beta x                                  for x > 0
             = (expm1(min(x, eps)) - x) alpha_n + beta x            otherwise
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import DecoderLayer, Linear, RMSNorm, rotary_dim
from mobius_text.models.arcee import UpDownMLP
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen import QKNormAttention, QwenConfig


class XIELU(nn.Module):
    """xIELU with its learned ``alpha_p``, ``alpha_n`` ``[1]`` and the ``beta``, ``eps`` scalars."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha_p = nn.Parameter([1])
        self.alpha_n = nn.Parameter([1])
        self.beta = nn.Parameter([])
        self.eps = nn.Parameter([])

    def forward(self, op, x: ir.Value) -> ir.Value:
        alpha_p = op.Softplus(self.alpha_p)
        alpha_n = op.Add(self.beta, op.Softplus(self.alpha_n))
        linear = op.Mul(self.beta, x)
        positive = op.Add(op.Mul(alpha_p, op.Mul(x, x)), linear)
        expm1 = op.Sub(op.Exp(op.Min(x, self.eps)), op.CastLike(1.0, x))
        negative = op.Add(op.Mul(op.Sub(expm1, x), alpha_n), linear)
        return op.Where(op.Greater(x, op.CastLike(0.0, x)), positive, negative)


class XIELUMLP(nn.Module):
    """``down_proj(xielu(up_proj(x)))``, the activation's parameters under ``act_fn``."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.up_proj = Linear(hidden_size, intermediate_size)
        self.down_proj = Linear(intermediate_size, hidden_size)
        self.act_fn = XIELU()

    def forward(self, op, x: ir.Value) -> ir.Value:
        return self.down_proj(op, self.act_fn(op, self.up_proj(op, x)))


class ApertusDecoderLayer(DecoderLayer):
    """The pre-norm layer with Apertus's norm names."""

    def __init__(self, self_attn, mlp, attention_layernorm, feedforward_layernorm) -> None:
        nn.Module.__init__(self)
        self.self_attn = self_attn
        self.mlp = mlp
        self.attention_layernorm = attention_layernorm
        self.feedforward_layernorm = feedforward_layernorm

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.attention_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        x = op.Add(x, self.mlp(op, self.feedforward_layernorm(op, x)))
        return x, present


class ApertusModel(LlamaModel):
    def make_attention(self, config, layer_idx):
        return QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )

    def make_layer(self, config, layer_idx):
        if config.hidden_act == "xielu":
            mlp = XIELUMLP(config.hidden_size, config.intermediate_size)
        else:
            mlp = UpDownMLP(config.hidden_size, config.intermediate_size, config.hidden_act, False)
        return ApertusDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=mlp,
            attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            feedforward_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class ApertusForCausalLM(LlamaForCausalLM):
    """Apertus's causal LM: the Llama head over :class:`ApertusModel`."""

    config_class = QwenConfig  # Apertus MLPs have no biases either
    model_class = ApertusModel


MODEL_TYPES = {"apertus": ApertusForCausalLM}
