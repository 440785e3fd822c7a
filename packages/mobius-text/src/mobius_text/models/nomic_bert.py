"""NomicBERT (transformers' ``nomic_bert``): GTE's post-norm rotary encoder without biases.

What differs from GTE (``gte.py``):

- no biases in attention or MLP; ``head_dim`` may differ from ``hidden / heads``;
- token type embeddings always, and the embedding norm sits beside them (``emb_ln``);
- the checkpoint names of the original implementation: ``encoder.layers.N.attn.Wqkv``,
  ``attn.out_proj``, ``mlp.fc11`` (up), ``mlp.fc12`` (gate), ``mlp.fc2``, ``norm1``, ``norm2``;
- BERT's heads: ``cls.predictions`` (its transform norm named ``layer_norm``), the pooler
  (``nomic_bert.pooler.dense``) under the sequence ``classifier``.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention, get_activation
from mobius_text.models.bert import (
    BertForFeatureExtraction,
    BertLMPredictionHead,
    BertOnlyMLMHead,
)
from mobius_text.models.gte import (
    GteConfig,
    GteEmbeddings,
    GteEncoder,
    GteModel,
    split_qkv,
)


@dataclass
class NomicBertConfig(GteConfig):
    pass


class NomicBertEmbeddings(GteEmbeddings):
    norm_inside = False  # the model's emb_ln


class NomicBertAttention(nn.Module):
    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.num_attention_heads * config.head_dim
        self.Wqkv = Linear(hidden, 3 * inner)
        self.out_proj = Linear(inner, hidden)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, rotary, bias):
        q, k, v = split_qkv(op, self.Wqkv(op, x), rotary, self.num_heads)
        out = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.out_proj(op, out)


class NomicBertMLP(nn.Module):
    """``fc2(act(fc12(x)) * fc11(x))``: ``fc12`` is the gate, ``fc11`` the up projection."""

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.fc11 = Linear(hidden, inner)
        self.fc12 = Linear(hidden, inner)
        self.fc2 = Linear(inner, hidden)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.fc2(op, op.Mul(self.act(op, self.fc12(op, x)), self.fc11(op, x)))


class NomicBertBlock(nn.Module):
    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.attn = NomicBertAttention(config)
        self.norm1 = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.mlp = NomicBertMLP(config)
        self.norm2 = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, rotary, bias):
        x = self.norm1(op, op.Add(x, self.attn(op, x, rotary, bias)))
        return self.norm2(op, op.Add(x, self.mlp(op, x)))


class NomicBertEncoder(GteEncoder):
    layer_class, layers_name = NomicBertBlock, "layers"


class NomicBertModel(GteModel):
    embeddings_class = NomicBertEmbeddings
    encoder_class = NomicBertEncoder

    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__(config)
        self.emb_ln = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def embed(self, op, input_ids, token_type_ids):
        return self.emb_ln(op, self.embeddings(op, input_ids, token_type_ids))


class NomicBertPredictionHeadTransform(nn.Module):
    def __init__(self, config: NomicBertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x):
        return self.layer_norm(op, self.act(op, self.dense(op, x)))


class NomicBertLMPredictionHead(BertLMPredictionHead):
    def __init__(self, config: NomicBertConfig, embeddings) -> None:
        super().__init__(config, embeddings)
        self.transform = NomicBertPredictionHeadTransform(config)


class NomicBertOnlyMLMHead(BertOnlyMLMHead):
    def __init__(self, config: NomicBertConfig, embeddings) -> None:
        super().__init__(config, embeddings)
        self.predictions = NomicBertLMPredictionHead(config, embeddings)


class NomicBertForFeatureExtraction(BertForFeatureExtraction):
    """BERT's tree under ``nomic_bert.*`` (``cls.predictions``, pooler, ``classifier``)."""

    config_class = NomicBertConfig
    base_model_prefix = "nomic_bert"
    model_class = NomicBertModel

    def masked_lm_head(self, config: NomicBertConfig) -> nn.Module:
        return NomicBertOnlyMLMHead(config, self.base_model.embeddings.word_embeddings)


MODEL_TYPES = {"nomic_bert": NomicBertForFeatureExtraction}
