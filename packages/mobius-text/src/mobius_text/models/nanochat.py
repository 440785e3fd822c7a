"""NanoChat: a Llama-shaped decoder with weightless RMS norms (also on the embeddings and on
queries/keys after RoPE), RoPE turning the other way, a ReLU² MLP and soft-capped logits."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from mobius.components import (
    MLP,
    Attention,
    DecoderLayer,
    Embedding,
    WeightlessRMSNorm,
    apply_rotary,
    merge_heads,
)
from mobius_text.models.gemma2 import SoftcappedLogits
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class NanoChatConfig(LlamaConfig):
    final_logit_softcapping: float | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "mlp_bias": False,
            "final_logit_softcapping": hf_config.final_logit_softcapping,
        }


class NormalizedEmbedding(Embedding):
    """Token lookup followed by a weightless RMS norm (NanoChat normalises embeddings first)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, eps: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.norm = WeightlessRMSNorm(embedding_dim, eps)

    def forward(self, op, ids: ir.Value) -> ir.Value:
        return self.norm(op, super().forward(op, ids))


class NanoChatAttention(Attention):
    """Rotates by ``-angle`` (HF's ``rotate_half`` is ``cat(x2, -x1)``), then RMS-normalises q and k."""

    def __init__(self, *args, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.qk_norm = WeightlessRMSNorm(self.head_dim, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        sin = op.Neg(sin)  # the flipped rotate_half is the standard one at the opposite angle
        q = self.qk_norm(op, apply_rotary(op, q, cos, sin, self.rotary_dim))
        k = self.qk_norm(op, apply_rotary(op, k, cos, sin, self.rotary_dim))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class NanoChatModel(LlamaModel):
    def __init__(self, config: NanoChatConfig) -> None:
        super().__init__(config)
        eps = config.rms_norm_eps
        self.embed_tokens = NormalizedEmbedding(config.vocab_size, config.hidden_size, eps)
        self.norm = WeightlessRMSNorm(config.hidden_size, eps)

    def make_layer(self, config: NanoChatConfig, layer_idx: int) -> DecoderLayer:
        eps = config.rms_norm_eps
        return DecoderLayer(
            self_attn=NanoChatAttention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                bias=config.attention_bias,
                out_bias=config.attention_bias,
                eps=eps,
            ),
            mlp=MLP(config.hidden_size, config.intermediate_size, config.hidden_act, bias=False),
            input_layernorm=WeightlessRMSNorm(config.hidden_size, eps),
            post_attention_layernorm=WeightlessRMSNorm(config.hidden_size, eps),
        )


class NanoChatForCausalLM(SoftcappedLogits, LlamaForCausalLM):
    """NanoChat causal LM; logits soft-capped when the config says so."""

    config_class = NanoChatConfig
    model_class = NanoChatModel


MODEL_TYPES = {"nanochat": NanoChatForCausalLM}
