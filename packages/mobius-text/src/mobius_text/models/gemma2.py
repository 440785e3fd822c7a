"""Gemma 2: Gemma with soft-capped attention and logits, four norms per layer and
alternating sliding-window / full attention layers."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Attention, GatedMLP, scaled_dot_product_attention, softcap
from mobius_text.models.gemma import GemmaConfig, GemmaForCausalLM, GemmaModel, GemmaRMSNorm


@dataclass
class Gemma2Config(GemmaConfig):
    # Scores are scaled by query_pre_attn_scalar ** -0.5, not head_dim ** -0.5.
    query_pre_attn_scalar: float = 256.0
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            # Gemma 2 names the MLP activation ``hidden_activation``.
            "hidden_act": getattr(hf_config, "hidden_activation", None) or hf_config.hidden_act,
            "query_pre_attn_scalar": hf_config.query_pre_attn_scalar,
            "attn_logit_softcapping": hf_config.attn_logit_softcapping,
            "final_logit_softcapping": hf_config.final_logit_softcapping,
        }


class SoftcapAttention(Attention):
    """Attention whose scaled scores are soft-capped before the mask is added.

    The ONNX ``Attention`` op's ``softcap`` applies ``cap * tanh(s / cap)`` to the
    scaled scores before the additive mask, exactly where Gemma 2 applies it, so
    masked keys stay at the lowest value.
    """

    def __init__(self, *args, softcap: float | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.softcap = softcap

    def attend(self, op, q, k, v, bias, past_key, past_value):
        if not self.softcap:
            return super().attend(op, q, k, v, bias, past_key, past_value)
        return scaled_dot_product_attention(
            op, q, k, v, bias, past_key, past_value, **self.attention_shape(),
            softcap=float(self.softcap),
        )  # fmt: skip


class SandwichDecoderLayer(nn.Module):
    """Norms before *and* after attention and the MLP: ``x + post(block(pre(x)))``."""

    def __init__(self, self_attn, mlp, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = GemmaRMSNorm(hidden_size, eps)
        self.post_attention_layernorm = GemmaRMSNorm(hidden_size, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(hidden_size, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(hidden_size, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, self.post_attention_layernorm(op, h))
        h = self.mlp(op, self.pre_feedforward_layernorm(op, x))
        x = op.Add(x, self.post_feedforward_layernorm(op, h))
        return x, present


class Gemma2Model(GemmaModel):
    def make_attention(self, config: Gemma2Config, layer_idx: int) -> Attention:
        return SoftcapAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            scale=config.query_pre_attn_scalar**-0.5,
            softcap=config.attn_logit_softcapping,
        )

    def make_layer(self, config: Gemma2Config, layer_idx: int) -> SandwichDecoderLayer:
        return SandwichDecoderLayer(
            self.make_attention(config, layer_idx),
            GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            config.hidden_size,
            config.rms_norm_eps,
        )


class SoftcappedLogits:
    """Causal-LM mixin: the logits soft-capped by ``config.final_logit_softcapping`` when set.

    Put it before the causal LM it caps: ``class X(SoftcappedLogits, LlamaForCausalLM)``.
    """

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        logits, presents = super().forward(
            op, input_ids, attention_mask, position_ids, past_key_values
        )
        if self.config.final_logit_softcapping:
            logits = softcap(op, logits, self.config.final_logit_softcapping)
        return logits, presents


class Gemma2ForCausalLM(SoftcappedLogits, GemmaForCausalLM):
    """Gemma 2 causal LM; the logits are soft-capped when the config says so."""

    config_class = Gemma2Config
    model_class = Gemma2Model


MODEL_TYPES = {"gemma2": Gemma2ForCausalLM}
