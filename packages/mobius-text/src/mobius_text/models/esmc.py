"""ESM C: a Llama-shaped bidirectional protein encoder (QK-LayerNorm, scaled residuals).

What differs from EuroBERT (Llama's layers made bidirectional, :mod:`.eurobert`):

- LayerNorms, not RMSNorms: ``input_layernorm`` / ``post_attention_layernorm`` with a
  bias, the final ``norm`` without one (eps ``1e-5``, PyTorch's default);
- QK-LayerNorm: ``q_norm`` / ``k_norm`` (no bias) over the whole projection
  ``[batch, seq, heads*dim]``, before the rotation;
- each residual branch is divided by ``sqrt(num_hidden_layers / 36)`` (ESM3's scaling);
- no grouped KV heads; RoPE at ``0, 1, 2...`` on every row (pads at the end);
- heads: ``lm_head`` (``decoder(layer_norm(gelu(dense(x))))``, never tied), ESM's
  ``classifier`` (``out_proj(tanh(dense(x[:, 0])))``) and a per-token ``score``.

The module tree follows ``EsmcFor*`` checkpoints (``esmc.*``, ``lm_head.*``,
``classifier.*``, ``score``); a bare ``EsmcModel`` gets the ``esmc.`` prefix. The
``sequence_id`` chain mask (multi-chain inputs) is not an input of the contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, GatedMLP, LayerNorm, Linear, padding_bias
from mobius.config import EncoderConfig, RopeConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import ClassificationHead, EncoderForFeatureExtraction
from mobius_text.models._encoder_rotary import EncoderRotary, rotate_heads, sequence_positions
from mobius_text.models.eurobert import EuroBertAttention, EuroBertConfig

TORCH_LAYER_NORM_EPS = 1e-5  # every ESM C norm is a default nn.LayerNorm


@dataclass
class EsmcConfig(EuroBertConfig):
    """EuroBERT's fields (Llama-style) read from an ESM C config, plus the residual scale."""

    residual_scale: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = EncoderConfig.hf_fields(hf_config)  # EuroBERT's reads fields ESM C has not
        hidden, heads = fields["hidden_size"], fields["num_attention_heads"]
        head_dim = int(getattr(hf_config, "head_dim", None) or hidden // heads)
        if heads * head_dim != hidden:
            raise ConfigError(
                "ESM C's q_norm/k_norm span hidden_size: heads * head_dim must equal it"
            )
        return {
            **fields,
            "type_vocab_size": 0,
            "layer_norm_eps": TORCH_LAYER_NORM_EPS,
            "tie_word_embeddings": False,  # transformers never ties the lm_head's decoder
            "num_key_value_heads": heads,  # the config refuses grouped KV heads
            "head_dim": head_dim,
            "rope": RopeConfig.from_hf(hf_config),
            "attention_bias": bool(hf_config.attention_bias),
            "mlp_bias": bool(hf_config.mlp_bias),
            "residual_scale": math.sqrt(fields["num_hidden_layers"] / 36),
        }


class EsmcAttention(EuroBertAttention):
    """EuroBERT's attention with ``q_norm`` / ``k_norm`` over the projections before RoPE."""

    def __init__(self, config: EsmcConfig) -> None:
        super().__init__(config)
        self.q_norm = LayerNorm(config.hidden_size, config.layer_norm_eps, bias=False)
        self.k_norm = LayerNorm(config.hidden_size, config.layer_norm_eps, bias=False)

    def forward(self, op, x, rotary, bias):
        q = self.q_norm(op, self.q_proj(op, x))  # [batch, seq, heads*dim]
        k = self.k_norm(op, self.k_proj(op, x))
        q = rotate_heads(op, q, rotary, self.num_heads)
        k = rotate_heads(op, k, rotary, self.num_heads)
        y = op.Attention(
            q,
            k,
            self.v_proj(op, x),
            bias,
            q_num_heads=self.num_heads,
            kv_num_heads=self.num_heads,
            scale=self.scale,
        )
        return self.o_proj(op, y)


class EsmcLayer(nn.Module):
    """``x + attn(ln(x)) / s``, then ``x + mlp(ln(x)) / s``; ``s = sqrt(layers / 36)``."""

    def __init__(self, config: EsmcConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.input_layernorm = LayerNorm(hidden, eps)
        self.self_attn = EsmcAttention(config)
        self.post_attention_layernorm = LayerNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act, config.mlp_bias)
        self.scale = config.residual_scale

    def forward(self, op, x, rotary, bias):
        attn = self.self_attn(op, self.input_layernorm(op, x), rotary, bias)
        x = op.Add(x, op.Div(attn, op.CastLike(self.scale, attn)))
        mlp = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(x, op.Div(mlp, op.CastLike(self.scale, mlp)))


class EsmcModel(nn.Module):
    def __init__(self, config: EsmcConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([EsmcLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LayerNorm(config.hidden_size, config.layer_norm_eps, bias=False)
        self.rotary = EncoderRotary(config.rope, config.head_dim, config.max_position_embeddings)

    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        rotary = self.rotary(op, sequence_positions(op, input_ids))  # shared by every layer
        for layer in self.layers:
            x = layer(op, x, rotary, bias)
        return self.norm(op, x)


class EsmcMaskedLMHead(nn.Module):
    """``decoder(layer_norm(gelu(dense(x))))``, every part biased."""

    def __init__(self, config: EsmcConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.dense = Linear(hidden, hidden, bias=True)
        self.layer_norm = LayerNorm(hidden, config.layer_norm_eps)
        self.decoder = Linear(hidden, config.vocab_size, bias=True)

    def forward(self, op, x):
        x = self.layer_norm(op, op.Gelu(self.dense(op, x), approximate="none"))
        return self.decoder(op, x)  # [batch, seq, vocab]


class EsmcForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``esmc.*``, ``lm_head``, ``classifier``, ``score``)."""

    config_class = EsmcConfig
    base_model_prefix = "esmc"
    model_class = EsmcModel
    head_names = ("lm_head", "classifier", "score")

    def __init__(self, config: EsmcConfig) -> None:
        super().__init__(config)
        hidden, labels = config.hidden_size, config.num_labels
        if config.head == "masked-lm":
            self.lm_head = EsmcMaskedLMHead(config)
        elif config.head == "sequence-classification":
            self.classifier = ClassificationHead(hidden, labels, "tanh")
        elif config.head == "token-classification":
            self.score = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.esmc(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        head = self.lm_head or self.classifier or self.score
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs


MODEL_TYPES = {"esmc": EsmcForFeatureExtraction}
