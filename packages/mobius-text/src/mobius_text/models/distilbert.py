"""DistilBERT: BERT's post-norm layers without token types or pooler, under its own names.

The module tree follows ``DistilBertFor*`` checkpoints (``distilbert.*``,
``vocab_*``, ``pre_classifier``, ``classifier``); a bare ``DistilBertModel``
checkpoint gets the ``distilbert.`` prefix added. Sinusoidal position embeddings
(``sinusoidal_pos_embds``) are stored in the checkpoint like learned ones, so they
change nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass
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
from mobius.config import EncoderConfig

# DistilBERT's LayerNorms have a fixed epsilon; the config has no field for it.
LAYER_NORM_EPS = 1e-12


@dataclass
class DistilBertConfig(EncoderConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields.update(
            intermediate_size=hf_config.hidden_dim,  # ``dim``/``hidden_dim``: model and FFN widths
            hidden_act=hf_config.activation,
            layer_norm_eps=LAYER_NORM_EPS,
            type_vocab_size=0,
        )
        return fields


class DistilBertEmbeddings(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, LAYER_NORM_EPS)

    def forward(self, op, input_ids):
        seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Unsqueeze(op.Range(0, seq_len, 1), [0])  # [1, seq]: padding sits at the end
        x = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        return self.LayerNorm(op, x)


class DistilBertSelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.q_lin = Linear(dim, dim, bias=True)
        self.k_lin = Linear(dim, dim, bias=True)
        self.v_lin = Linear(dim, dim, bias=True)
        self.out_lin = Linear(dim, dim, bias=True)
        self.num_heads, self.scale = num_heads, (dim // num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.q_lin(op, x), self.k_lin(op, x), self.v_lin(op, x)
        attended = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.out_lin(op, attended)


class DistilBertFFN(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, act: str) -> None:
        super().__init__()
        self.lin1 = Linear(dim, hidden_dim, bias=True)
        self.lin2 = Linear(hidden_dim, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.lin2(op, self.act(op, self.lin1(op, x)))


class TransformerBlock(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.attention = DistilBertSelfAttention(dim, config.num_attention_heads)
        self.sa_layer_norm = LayerNorm(dim, LAYER_NORM_EPS)
        self.ffn = DistilBertFFN(dim, config.intermediate_size, config.hidden_act)
        self.output_layer_norm = LayerNorm(dim, LAYER_NORM_EPS)

    def forward(self, op, x, bias):
        x = self.sa_layer_norm(op, op.Add(self.attention(op, x, bias), x))  # post-norm
        return self.output_layer_norm(op, op.Add(self.ffn(op, x), x))


class Transformer(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(
            [TransformerBlock(config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, op, x, bias):
        for layer in self.layer:
            x = layer(op, x, bias)
        return x


class DistilBertModel(nn.Module):
    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.embeddings = DistilBertEmbeddings(config)
        self.transformer = Transformer(config)

    def forward(self, op, input_ids, attention_mask):
        x = self.embeddings(op, input_ids)  # [batch, seq, dim]
        return self.transformer(op, x, padding_bias(op, attention_mask, x.dtype))


class DistilBertForFeatureExtraction(nn.Module):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`).

    masked-lm: ``vocab_transform`` (activation, ``vocab_layer_norm``) then
    ``vocab_projector``, whose weight is the word embeddings unless untied;
    sequence classification: ``relu(pre_classifier(x[:, 0]))`` then ``classifier``.
    """

    config_class = DistilBertConfig
    task = "feature-extraction"
    uses_token_type_ids = False

    def __init__(self, config: DistilBertConfig) -> None:
        super().__init__()
        self.config = config
        dim, head = config.hidden_size, config.head
        self.distilbert = DistilBertModel(config)
        self.vocab_transform = self.vocab_layer_norm = self.vocab_projector = None
        self.vocab_bias = None
        self.pre_classifier = self.classifier = None
        if head == "masked-lm":
            self.vocab_transform = Linear(dim, dim, bias=True)
            self.act = get_activation(config.hidden_act)
            self.vocab_layer_norm = LayerNorm(dim, LAYER_NORM_EPS)
            self.vocab_projector = (
                TiedProjector(self.distilbert.embeddings.word_embeddings, config.vocab_size)
                if config.tie_word_embeddings
                else Linear(dim, config.vocab_size, bias=True)
            )
        elif head in ("sequence-classification", "token-classification"):
            if head == "sequence-classification":
                self.pre_classifier = Linear(dim, dim, bias=True)
            self.classifier = Linear(dim, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        hidden = self.distilbert(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.vocab_projector is not None:
            x = self.vocab_layer_norm(op, self.act(op, self.vocab_transform(op, hidden)))
            outputs["logits"] = self.vocab_projector(op, x)
        elif self.pre_classifier is not None:
            first = op.Gather(hidden, op.Constant(value_int=0), axis=1)  # [batch, dim]
            outputs["logits"] = self.classifier(op, op.Relu(self.pre_classifier(op, first)))
        elif self.classifier is not None:
            outputs["logits"] = self.classifier(op, hidden)
        return outputs

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (other heads, position buffers)."""
        ignored = ["distilbert.embeddings.position_ids"]
        if self.vocab_projector is None:
            ignored += ["vocab_transform.*", "vocab_layer_norm.*", "vocab_projector.*"]
        if self.pre_classifier is None:
            ignored.append("pre_classifier.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def preprocess_weights(self, weights: dict) -> dict:
        """A bare ``DistilBertModel`` checkpoint gets the ``distilbert.`` prefix; a tied projector's copy goes."""
        heads = ("distilbert.", "vocab_", "pre_classifier.", "classifier.")
        weights = {k if k.startswith(heads) else f"distilbert.{k}": v for k, v in weights.items()}
        if self.config.tie_word_embeddings:
            weights.pop("vocab_projector.weight", None)
        return weights


class TiedProjector(nn.Module):
    """``x @ word_embeddings.T + bias``: the tied ``vocab_projector`` (only its bias is its own)."""

    def __init__(self, embeddings: Embedding, vocab_size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter([vocab_size])
        object.__setattr__(self, "embeddings", embeddings)  # owned by distilbert.embeddings

    def forward(self, op, x):
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [dim, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


MODEL_TYPES = {"distilbert": DistilBertForFeatureExtraction}
