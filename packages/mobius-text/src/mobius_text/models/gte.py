"""GTE (transformers' ``gte``): a post-norm encoder with RoPE and a gated MLP.

What differs from BERT:

- no position embeddings: rotate-half RoPE on q and k in every layer (``rope_parameters``,
  default theta 160000), positions 0, 1, 2... on every row;
- token type embeddings only when ``type_vocab_size`` is set (gte-base-en-v1.5 has none);
  with one type the tokenizer gives no ``token_type_ids`` and every token is type 0;
- layers ``attn_ln(x + o_proj(attn(x)))`` then ``mlp_ln(x + down_proj(act(gate) * up))``,
  with a fused ``qkv_proj`` and ``[up | gate] = up_gate_proj(x)``;
- heads: ``lm_head`` (dense, exact GELU, ``norm``, ``decoder`` with its own bias, tied to
  the word embeddings), the pooler (``gte.pooler.dense``, tanh on the first token) under
  the sequence ``classifier``, ``classifier`` per token otherwise.

The module tree follows the checkpoints as transformers saves them and the hub holds
them (``gte.encoder.layer.N.attention.qkv_proj``...; transformers renames them to
``layers.N.self_attn.q_proj``... on load). Hub checkpoints of the original
implementation prefix the encoder ``new.``, read here as ``gte.``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    bidirectional_attention,
    get_activation,
    padding_bias,
)
from mobius.config import EncoderConfig, RopeConfig
from mobius_text.models._bert_common import EncoderForFeatureExtraction, VocabProjection
from mobius_text.models._encoder_rotary import EncoderRotary, rotate_heads, sequence_positions
from mobius_text.models.bert import BertModel


@dataclass
class GteConfig(EncoderConfig):
    """Encoder fields plus the rope and the head width (``head_dim``, when the config sets one)."""

    head_dim: int = 0
    rope: RopeConfig = field(default_factory=RopeConfig)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        width = fields["hidden_size"] // fields["num_attention_heads"]
        return {
            **fields,
            "head_dim": int(getattr(hf_config, "head_dim", None) or width),
            "rope": RopeConfig.from_hf(hf_config),
        }


class GteEmbeddings(nn.Module):
    """Word and (when the config has them) token type embeddings; GTE normalises them here."""

    norm_inside = True  # NomicBERT normalises beside them (its model's emb_ln)

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.token_type_embeddings = (
            Embedding(config.type_vocab_size, config.hidden_size)
            if config.type_vocab_size
            else None
        )
        self.LayerNorm = (
            LayerNorm(config.hidden_size, config.layer_norm_eps) if self.norm_inside else None
        )

    def forward(self, op, input_ids, token_type_ids):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        if self.token_type_embeddings is not None:
            if token_type_ids is None:  # as transformers does without them: every token is type 0
                # [batch, seq] zeros, not one row: ORT's SkipLayerNorm fusion wants a 3-D skip
                token_type_ids = op.Mul(input_ids, op.Constant(value_int=0))
            x = op.Add(x, self.token_type_embeddings(op, token_type_ids))
        return self.LayerNorm(op, x) if self.LayerNorm is not None else x


def split_qkv(op, qkv, rotary, num_heads: int):
    """``[q | k | v]`` -> rotated q and k, and v, each ``[batch, seq, heads*dim]``."""
    q, k, v = op.Split(qkv, num_outputs=3, axis=-1, _outputs=3)
    return rotate_heads(op, q, rotary, num_heads), rotate_heads(op, k, rotary, num_heads), v


class GteAttention(nn.Module):
    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.num_attention_heads * config.head_dim
        self.qkv_proj = Linear(hidden, 3 * inner, bias=True)
        self.o_proj = Linear(inner, hidden, bias=True)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, rotary, bias):
        q, k, v = split_qkv(op, self.qkv_proj(op, x), rotary, self.num_heads)
        return self.o_proj(
            op, bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        )


class GteMLP(nn.Module):
    """``down_proj(act(gate) * up)`` where ``up_gate_proj`` yields ``[up, gate]``."""

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.up_gate_proj = Linear(hidden, 2 * inner)
        self.down_proj = Linear(inner, hidden, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        up, gate = op.Split(self.up_gate_proj(op, x), num_outputs=2, axis=-1, _outputs=2)
        return self.down_proj(op, op.Mul(self.act(op, gate), up))


class GteLayer(nn.Module):
    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        self.attention = GteAttention(config)
        self.attn_ln = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.mlp = GteMLP(config)
        self.mlp_ln = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, rotary, bias):
        x = self.attn_ln(op, op.Add(x, self.attention(op, x, rotary, bias)))
        return self.mlp_ln(op, op.Add(x, self.mlp(op, x)))


class GteEncoder(nn.Module):
    layer_class, layers_name = GteLayer, "layer"  # NomicBERT: its layers under "layers"

    def __init__(self, config: GteConfig) -> None:
        super().__init__()
        layers = [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        setattr(self, self.layers_name, nn.ModuleList(layers))

    def forward(self, op, x, rotary, bias):
        for layer in getattr(self, self.layers_name):
            x = layer(op, x, rotary, bias)
        return x


class GteModel(BertModel):
    """Embeddings, rotary encoder and (for sequence classification) BERT's pooler."""

    embeddings_class = GteEmbeddings
    encoder_class = GteEncoder

    def __init__(self, config: GteConfig) -> None:
        super().__init__(config)
        self.rotary = EncoderRotary(config.rope, config.head_dim, config.max_position_embeddings)

    def embed(self, op, input_ids, token_type_ids):
        return self.embeddings(op, input_ids, token_type_ids)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        """``(last_hidden_state, pooled or None)``."""
        x = self.embed(op, input_ids, token_type_ids)
        bias = padding_bias(op, attention_mask, x.dtype)
        rotary = self.rotary(op, sequence_positions(op, input_ids))  # shared by every layer
        x = self.encoder(op, x, rotary, bias)
        return x, self.pooler(op, x) if self.pooler is not None else None


class GteLMHead(nn.Module):
    """``decoder(norm(gelu(dense(x))))``: exact GELU whatever ``hidden_act`` says."""

    def __init__(self, config: GteConfig, embeddings: Embedding) -> None:
        super().__init__()
        hidden, vocab = config.hidden_size, config.vocab_size
        self.dense = Linear(hidden, hidden, bias=True)
        self.act = get_activation("gelu")
        self.norm = LayerNorm(hidden, config.layer_norm_eps)
        self.decoder = VocabProjection(hidden, vocab, embeddings, config.tie_word_embeddings)

    def forward(self, op, x):
        return self.decoder(op, self.norm(op, self.act(op, self.dense(op, x))))


class GteForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``gte.*``, ``lm_head.*``, ``classifier``)."""

    config_class = GteConfig
    base_model_prefix = "gte"
    model_class = GteModel
    head_names = ("lm_head", "classifier")
    optional_parts = ("pooler",)
    tied_copies = ("lm_head.decoder.weight",)

    def __init__(self, config: GteConfig) -> None:
        super().__init__(config)
        # one type (or none): the tokenizer gives no token_type_ids, every token is type 0
        self.uses_token_type_ids = config.type_vocab_size > 1
        if config.head == "masked-lm":
            self.lm_head = GteLMHead(config, self.gte.embeddings.word_embeddings)
        elif config.head in ("sequence-classification", "token-classification"):
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden, pooled = self.gte(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        if self.lm_head is not None:
            outputs["logits"] = self.lm_head(op, hidden)
        elif self.classifier is not None:  # sequence level: on the pooled first token
            outputs["logits"] = self.classifier(op, hidden if pooled is None else pooled)
        return outputs

    def sanitize(self, weights: dict) -> dict:
        """``new.`` (the original implementation's encoder prefix) is read as ``gte.``."""
        return super().sanitize({k.removeprefix("new."): v for k, v in weights.items()})


MODEL_TYPES = {"gte": GteForFeatureExtraction}
