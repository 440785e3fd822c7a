"""The Q-Former of BLIP-2 and InstructBLIP: learned queries that read an image by cross-attention.

Shared by mobius-vision (BLIP-2, InstructBLIP, BLIP, Granite 4 Vision) and mobius-audio
(Granite Speech's windowed projector, whose queries read audio states the same way).

A BERT-like post-norm encoder over ``num_query_tokens`` learned query embeddings: each
layer's self-attention runs over the queries (InstructBLIP: the queries and the
instruction's tokens together, under its attention mask), every
``cross_attention_frequency``-th layer then lets the queries attend to the vision
tower's states, and the queries and the text go through feed-forward blocks of
their own (``intermediate_query``/``output_query``; ``intermediate``/``output``).
The queries' final states are what the language projection reads. Submodules carry
transformers' names (``encoder.layer.{i}.attention.attention.query``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components._activations import get_activation
from mobius.components._encoder import bidirectional_attention, padding_bias
from mobius.components._linear import Embedding, Linear
from mobius.components._norms import LayerNorm


@dataclass(frozen=True)
class QFormerConfig:
    """The sizes of a ``blip_2_qformer``/``instructblip_qformer`` config."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    layer_norm_eps: float
    cross_attention_frequency: int
    encoder_hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    #: Whether the layers have the text feed-forward block (InstructBLIP's always do).
    text_input: bool

    @classmethod
    def from_hf(cls, hf_config: Any, text_input: bool) -> QFormerConfig:
        return cls(
            hidden_size=int(hf_config.hidden_size),
            num_hidden_layers=int(hf_config.num_hidden_layers),
            num_attention_heads=int(hf_config.num_attention_heads),
            intermediate_size=int(hf_config.intermediate_size),
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=float(hf_config.layer_norm_eps),
            cross_attention_frequency=int(hf_config.cross_attention_frequency),
            encoder_hidden_size=int(hf_config.encoder_hidden_size),
            vocab_size=int(hf_config.vocab_size),
            max_position_embeddings=int(hf_config.max_position_embeddings),
            text_input=text_input,
        )

    def has_cross_attention(self, layer: int) -> bool:
        return layer % self.cross_attention_frequency == 0


class QFormerMultiHeadAttention(nn.Module):
    """``query`` from the hidden states, ``key``/``value`` from ``states`` (themselves, or the image's)."""

    def __init__(self, config: QFormerConfig, kv_width: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.query = Linear(d, d, bias=True)
        self.key = Linear(kv_width, d, bias=True)
        self.value = Linear(kv_width, d, bias=True)
        self.num_heads = config.num_attention_heads
        self.scale = (d // self.num_heads) ** -0.5

    def forward(self, op, x, states, bias):
        q, k, v = self.query(op, x), self.key(op, states), self.value(op, states)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class QFormerOutput(nn.Module):
    """Post-norm residual: ``LayerNorm(dense(h) + residual)``."""

    def __init__(self, in_features: int, config: QFormerConfig) -> None:
        super().__init__()
        self.dense = Linear(in_features, config.hidden_size, bias=True)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, h, residual):
        return self.LayerNorm(op, op.Add(self.dense(op, h), residual))


class QFormerAttention(nn.Module):
    def __init__(self, config: QFormerConfig, kv_width: int) -> None:
        super().__init__()
        self.attention = QFormerMultiHeadAttention(config, kv_width)
        self.output = QFormerOutput(config.hidden_size, config)

    def forward(self, op, x, states, bias):
        return self.output(op, self.attention(op, x, states, bias), x)


class QFormerIntermediate(nn.Module):
    def __init__(self, config: QFormerConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.act(op, self.dense(op, x))


class QFormerLayer(nn.Module):
    """Self-attention over queries (and text), cross-attention of the queries to the image
    on every ``cross_attention_frequency``-th layer, then each part's feed-forward block."""

    def __init__(self, config: QFormerConfig, index: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.attention = QFormerAttention(config, d)
        self.crossattention = None
        if config.has_cross_attention(index):
            self.crossattention = QFormerAttention(config, config.encoder_hidden_size)
        self.intermediate = self.output = None
        if config.text_input:
            self.intermediate = QFormerIntermediate(config)
            self.output = QFormerOutput(config.intermediate_size, config)
        self.intermediate_query = QFormerIntermediate(config)
        self.output_query = QFormerOutput(config.intermediate_size, config)

    def forward(self, op, x, bias, image_states, queries: int, with_text: bool):
        """``x [batch, queries (+ text), hidden]``; ``with_text``: run the text part too
        (the last layer's text states are never read)."""
        h = self.attention(op, x, x, bias)
        # queries first; text (where the model reads any) after them
        q = op.Slice(h, [0], [queries], [1]) if self.output is not None else h
        if self.crossattention is not None:
            q = self.crossattention(op, q, image_states, None)
        q = self.output_query(op, self.intermediate_query(op, q), q)
        if not with_text:
            return q
        text = op.Slice(h, [queries], [2**62], [1])
        text = self.output(op, self.intermediate(op, text), text)
        return op.Concat(q, text, axis=1)


class QFormerEncoder(nn.Module):
    def __init__(self, config: QFormerConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(
            [QFormerLayer(config, i) for i in range(config.num_hidden_layers)]
        )

    def forward(self, op, x, bias, image_states, queries: int, with_text: bool):
        """The queries' final states ``[batch, queries, hidden]``."""
        last = len(self.layer) - 1
        for i, layer in enumerate(self.layer):
            x = layer(op, x, bias, image_states, queries, with_text and i < last)
        return x


class Blip2QFormerModel(nn.Module):
    """BLIP-2's Q-Former: ``layernorm`` over the queries, then the layers (no text)."""

    def __init__(self, config: QFormerConfig) -> None:
        super().__init__()
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.encoder = QFormerEncoder(config)

    def forward(self, op, query_embeds, image_states, queries: int):
        x = self.layernorm(op, query_embeds)
        return self.encoder(op, x, None, image_states, queries, with_text=False)


class QFormerEmbeddings(nn.Module):
    """InstructBLIP: ``[queries, words + positions]`` through ``layernorm``."""

    def __init__(self, config: QFormerConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, d)
        self.position_embeddings = Embedding(config.max_position_embeddings, d)
        self.layernorm = LayerNorm(d, config.layer_norm_eps)

    def forward(self, op, query_embeds, input_ids):
        length = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Unsqueeze(op.Range(0, length, 1), [0])  # [1, text]
        words = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        return self.layernorm(op, op.Concat(query_embeds, words, axis=1))


class InstructBlipQFormerModel(nn.Module):
    """InstructBLIP's Q-Former: the instruction's tokens join the queries' self-attention."""

    def __init__(self, config: QFormerConfig) -> None:
        super().__init__()
        self.embeddings = QFormerEmbeddings(config)
        self.encoder = QFormerEncoder(config)

    def forward(
        self, op, query_embeds, image_states, queries: int, input_ids, attention_mask, dtype
    ):
        """``input_ids``/``attention_mask`` ``[batch, text]``: the instruction, padded;
        ``dtype`` the graph's float type (of the mask's bias)."""
        x = self.embeddings(op, query_embeds, input_ids)
        # the queries are always attended; the instruction's pads never are
        batch = op.Shape(attention_mask, start=0, end=1)
        ones = op.Expand(op.Constant(value_ints=[1]), op.Concat(batch, [queries], axis=0))
        mask = op.Concat(op.CastLike(ones, attention_mask), attention_mask, axis=1)
        bias = padding_bias(op, mask, dtype)
        return self.encoder(op, x, bias, image_states, queries, with_text=True)
