"""EuroBERT: Llama's pre-norm layers (RMSNorm, grouped KV heads, RoPE, SwiGLU) made bidirectional.

What differs from BERT:

- no position or token type embeddings: rotate-half RoPE on q and k (``rope_parameters``);
- pre-norm layers ``x + attn(input_layernorm(x))``, ``x + mlp(post_attention_layernorm(x))``,
  RMSNorm, ``num_key_value_heads`` key/value heads, a final ``norm``;
- heads: ``lm_head`` (biased with ``mlp_bias``, tied to ``model.embed_tokens`` when
  ``tie_word_embeddings``), sequence classification ``classifier(gelu(dense(.)))``
  pooled as ``classifier_pooling`` says (``bos``: the first token, ``mean``: the mean of
  the real tokens, ``late``: the mean of the real tokens' logits), ``classifier`` per token.

The module tree follows ``EuroBertFor*`` checkpoints (``model.*``, ``lm_head``,
``dense``, ``classifier``); a bare ``EuroBertModel`` gets the ``model.`` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, GatedMLP, Linear, RMSNorm, get_activation, padding_bias
from mobius.config import EncoderConfig, RopeConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    EncoderForFeatureExtraction,
    VocabProjection,
    pool_first_or_mean,
)
from mobius_text.models._encoder_rotary import EncoderRotary, rotate_heads, sequence_positions

POOLINGS = ("bos", "mean", "late")


@dataclass
class EuroBertConfig(EncoderConfig):
    """Encoder fields plus the KV heads, head width, rope, biases and classifier pooling."""

    num_key_value_heads: int = 0
    head_dim: int = 0
    rope: RopeConfig = field(default_factory=RopeConfig)
    attention_bias: bool = False
    mlp_bias: bool = False
    decoder_bias: bool = False  # the lm_head's bias: mlp_bias, as transformers builds it
    classifier_pooling: str = "late"

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        pooling = hf_config.classifier_pooling
        if pooling not in POOLINGS:
            raise ConfigError(f"classifier_pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
        fields = super().hf_fields(hf_config)
        heads = fields["num_attention_heads"]
        mlp_bias = bool(hf_config.mlp_bias)
        return {
            **fields,
            "type_vocab_size": 0,
            "layer_norm_eps": float(hf_config.rms_norm_eps),
            "num_key_value_heads": int(getattr(hf_config, "num_key_value_heads", None) or heads),
            "head_dim": int(getattr(hf_config, "head_dim", None) or fields["hidden_size"] // heads),
            "rope": RopeConfig.from_hf(hf_config),
            "attention_bias": bool(hf_config.attention_bias),
            "mlp_bias": mlp_bias,
            "decoder_bias": mlp_bias,
            "classifier_pooling": pooling,
        }


class EuroBertAttention(nn.Module):
    def __init__(self, config: EuroBertConfig) -> None:
        super().__init__()
        hidden, dim, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = Linear(hidden, self.num_heads * dim, bias)
        self.k_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.v_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.o_proj = Linear(self.num_heads * dim, hidden, bias)
        self.scale = dim**-0.5

    def forward(self, op, x, rotary, bias):
        q = rotate_heads(op, self.q_proj(op, x), rotary, self.num_heads)
        k = rotate_heads(op, self.k_proj(op, x), rotary, self.num_kv_heads)
        y = op.Attention(
            q,
            k,
            self.v_proj(op, x),
            bias,
            q_num_heads=self.num_heads,
            kv_num_heads=self.num_kv_heads,
            scale=self.scale,
        )
        return self.o_proj(op, y)


class EuroBertDecoderLayer(nn.Module):
    def __init__(self, config: EuroBertConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = EuroBertAttention(config)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act, config.mlp_bias)

    def forward(self, op, x, rotary, bias):
        x = op.Add(x, self.self_attn(op, self.input_layernorm(op, x), rotary, bias))
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))


class EuroBertModel(nn.Module):
    def __init__(self, config: EuroBertConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        layers = [EuroBertDecoderLayer(config) for _ in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.layer_norm_eps)
        self.rotary = EncoderRotary(config.rope, config.head_dim, config.max_position_embeddings)

    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        bias = padding_bias(op, attention_mask, x.dtype)
        rotary = self.rotary(op, sequence_positions(op, input_ids))  # shared by every layer
        for layer in self.layers:
            x = layer(op, x, rotary, bias)
        return self.norm(op, x)


class EuroBertForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``model.*``, ``lm_head``, ``dense``, ``classifier``)."""

    config_class = EuroBertConfig
    base_model_prefix = "model"
    model_class = EuroBertModel
    head_names = ("lm_head", "dense", "classifier")
    tied_copies = ("lm_head.weight",)

    def __init__(self, config: EuroBertConfig) -> None:
        super().__init__(config)
        if config.head == "masked-lm":  # its weight, or model.embed_tokens when tied
            hidden, vocab, tied = config.hidden_size, config.vocab_size, config.tie_word_embeddings
            embeddings = self.model.embed_tokens
            self.lm_head = VocabProjection(hidden, vocab, embeddings, tied, config.decoder_bias)
        elif config.head == "sequence-classification":
            self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
            self.act = get_activation("gelu")
        if config.head in ("sequence-classification", "token-classification"):
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    def classify(self, op, hidden, attention_mask):
        """``[batch, num_labels]``: pooled then classified, or (``late``) classified then pooled."""
        mode = self.config.classifier_pooling
        head = lambda x: self.classifier(op, self.act(op, self.dense(op, x)))  # noqa: E731
        if mode == "late":
            return pool_first_or_mean(op, head(hidden), attention_mask, "mean")
        return head(
            pool_first_or_mean(op, hidden, attention_mask, "cls" if mode == "bos" else mode)
        )

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.model(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.lm_head is not None:
            outputs["logits"] = self.lm_head(op, hidden)
        elif self.dense is not None:
            outputs["logits"] = self.classify(op, hidden, attention_mask)
        elif self.classifier is not None:
            outputs["logits"] = self.classifier(op, hidden)
        return outputs


MODEL_TYPES = {"eurobert": EuroBertForFeatureExtraction}
