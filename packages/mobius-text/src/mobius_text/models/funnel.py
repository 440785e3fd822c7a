"""Funnel Transformer: blocks that halve the sequence, relative attention, an upsampling decoder.

- embeddings: the word embeddings and a LayerNorm (no positions, no token types);
- each block after the first pools the sequence by 2 (mean or max, ``ceil`` length;
  with ``separate_cls`` the first token is kept apart and, with ``truncate_seq``, the
  last one dropped), the first layer attending from the pooled queries to the unpooled
  keys (``pool_q_only``) or from pooled to pooled; ``block_repeats`` reruns a layer;
- attention scores are content ``(q + r_w_bias) . k``, position ``((q + r_r_bias) @
  r_kernel) . [sin, cos](pos_q - pos_k)`` and token type ``(q + r_s_bias) .
  seg_embed[same type]`` (type 2, ``<cls>``, is the same as every type); the position
  and type terms are zero on the ``<cls>`` row and column with ``separate_cls``; keys
  masked by the (min-pooled) mask get ``-1e6``;
- the decoder (``FunnelModel``: masked LM, token classification, question answering)
  repeats the last block's tokens back to the input length, adds the first block's
  output and runs ``num_decoder_layers`` full-length layers;
- sequence classification reads ``FunnelBaseModel`` (no decoder; nor does the bare
  encoder of a ``FunnelBaseModel`` checkpoint, ``funnel-transformer/*-base``): its
  ``last_hidden_state`` is the last block's, pooled, sequence (``ceil`` halved per
  block). Multiple choice (also ``FunnelBaseModel``) is refused: the task reshapes
  ``last_hidden_state`` to the input's length.

Both ``attention_type`` values are the same scores: the graph computes the position term
in the factorized form (``sin(a - b) = sin a cos b - cos a sin b``...), in ``O(seq * d_model)``,
for ``relative_shift`` too (equal up to float rounding). Pooling is a gather of token
pairs (see :class:`Pooling`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    EncoderForFeatureExtraction,
    VocabProjection,
    first_token,
)

INF = 1e6  # transformers' mask value
CLS_TYPE = 2  # the token type of <cls>, the same segment as every other
BASE_HEADS = ("sequence-classification", "multiple-choice")  # FunnelBaseModel's heads
BASE_CLASS_SUFFIXES = ("SequenceClassification", "MultipleChoice")


@dataclass
class FunnelConfig(EncoderConfig):
    """Encoder fields plus the blocks, the decoder depth, the head width and the pooling switches."""

    block_sizes: list[int] = field(default_factory=lambda: [4, 4, 4])
    block_repeats: list[int] = field(default_factory=lambda: [1, 1, 1])
    num_decoder_layers: int = 2
    d_head: int = 64
    pooling_type: str = "mean"
    separate_cls: bool = True
    truncate_seq: bool = True
    pool_q_only: bool = True
    #: the checkpoint is a ``FunnelBaseModel`` (or one of its heads'): no decoder
    base_checkpoint: bool = False

    @property
    def uses_decoder(self) -> bool:
        if self.head == "none":
            return not self.base_checkpoint
        return self.head not in BASE_HEADS

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.attention_type not in ("relative_shift", "factorized"):
            raise ConfigError(f"attention_type {hf_config.attention_type!r} is not built")
        if hf_config.pooling_type not in ("mean", "max"):
            raise ConfigError(f"pooling_type {hf_config.pooling_type!r} is not built")
        sizes = [int(n) for n in hf_config.block_sizes]
        repeats = [int(n) for n in (hf_config.block_repeats or [1] * len(sizes))]
        architecture = next(iter(getattr(hf_config, "architectures", None) or []), "")
        base_classes = ("FunnelBaseModel", *(f"FunnelFor{h}" for h in BASE_CLASS_SUFFIXES))
        return {
            **super().hf_fields(hf_config),
            "intermediate_size": int(hf_config.d_inner),
            "layer_norm_eps": float(hf_config.layer_norm_eps),
            "block_sizes": sizes,
            "block_repeats": repeats,
            "num_decoder_layers": int(hf_config.num_decoder_layers),
            "d_head": int(hf_config.d_head),
            "pooling_type": hf_config.pooling_type,
            "separate_cls": bool(hf_config.separate_cls),
            "truncate_seq": bool(hf_config.truncate_seq),
            "pool_q_only": bool(hf_config.pool_q_only),
            "base_checkpoint": architecture in base_classes,
        }


def _float(op, value, like):
    return op.CastLike(op.Constant(value=ir.tensor(np.asarray(value, np.float32))), like)


def _length(op, x, axis: int = 1):
    return op.Shape(x, start=axis, end=axis + 1)  # [1]


class Tokens:
    """What the attention needs of a sequence: positions ``[seq]`` (float), token types
    ``[batch, seq]`` and the mask ``[batch, seq]`` (float, 1 real)."""

    def __init__(self, positions, types, mask) -> None:
        self.positions, self.types, self.mask = positions, types, mask


class Pooling:
    """transformers' ``pool_tensor`` (states, mask) and ``stride_pool`` (positions, types) as
    gathers: pooled token ``k`` reduces tokens ``first[k]`` and ``second[k]`` (the same
    token for a lone last one), and strided entries are ``first[k]``.

    transformers pools a block's input only when it is longer than 2 tokens (1 without
    ``separate_cls``); shorter, the indices are ``0, 1, 2...`` and nothing changes (there
    transformers 5 itself fails with ``separate_cls``: its ``<cls>`` mask keeps the
    unpooled shape).
    """

    def __init__(self, config: FunnelConfig) -> None:
        self.mode = config.pooling_type
        self.shift = 1 if config.separate_cls else 0  # <cls> doubled in front
        self.drop_last = 1 if config.separate_cls and config.truncate_seq else 0
        self.minimum = 2 if config.separate_cls else 1

    def indices(self, op, x):
        """``(first, second)`` ``[pooled]`` int64 for the states ``x [batch, seq, hidden]``."""
        length = op.Squeeze(_length(op, x), [0])
        one, two = op.Constant(value_int=1), op.Constant(value_int=2)
        span = op.Add(length, op.Constant(value_int=self.shift - self.drop_last))  # cls + rest
        pools = op.Greater(length, op.Constant(value_int=self.minimum))
        count = op.Where(pools, op.Div(op.Add(span, one), two), length)  # ceil(span / 2)
        k = op.Range(op.Constant(value_int=0), count, one)
        even = op.Mul(k, two)
        odd = op.Min(op.Add(even, one), op.Sub(span, one))
        shift, zero = op.Constant(value_int=self.shift), op.Constant(value_int=0)
        first = op.Where(pools, op.Max(op.Sub(even, shift), zero), k)
        second = op.Where(pools, op.Max(op.Sub(odd, shift), zero), k)
        return first, second

    def pool(self, op, x, pairs, mode: str):
        """``[batch, seq(, hidden)]`` -> ``[batch, pooled(, hidden)]``, pairs reduced by ``mode``."""
        a, b = (op.Gather(x, index, axis=1) for index in pairs)
        if mode == "mean":
            return op.Div(op.Add(a, b), op.CastLike(op.Constant(value_float=2.0), x))
        return op.Max(a, b) if mode == "max" else op.Min(a, b)

    def tokens(self, op, tokens: Tokens, pairs, pool_mask: bool) -> Tokens:
        mask = self.pool(op, tokens.mask, pairs, "min") if pool_mask else tokens.mask
        first = pairs[0]
        return Tokens(
            op.Gather(tokens.positions, first, axis=0), op.Gather(tokens.types, first, axis=1), mask
        )


class FunnelRelMultiheadAttention(nn.Module):
    """Content, position and token-type scores; ``layer_norm(query + post_proj(context))``."""

    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        d, n, h = config.hidden_size, config.num_attention_heads, config.d_head
        self.q_head = Linear(d, n * h, bias=False)
        self.k_head = Linear(d, n * h, bias=True)
        self.v_head = Linear(d, n * h, bias=True)
        self.r_w_bias = nn.Parameter([n, h])
        self.r_r_bias = nn.Parameter([n, h])
        self.r_kernel = nn.Parameter([d, n, h])
        self.r_s_bias = nn.Parameter([n, h])
        self.seg_embed = nn.Parameter([2, n, h])
        self.post_proj = Linear(n * h, d, bias=True)
        self.layer_norm = LayerNorm(d, config.layer_norm_eps)
        self.num_heads, self.d_head, self.scale = n, h, h**-0.5
        half = d // 2
        self.inv_freq = 1 / (10000 ** (np.arange(half, dtype=np.float32) / np.float32(half)))
        self.separate_cls = config.separate_cls

    def heads(self, op, x):
        """``[batch, seq, heads*dim]`` -> ``[batch, heads, seq, dim]``."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.d_head]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def angles(self, op, positions, like):
        """``(sin, cos)`` of ``positions [seq] * inv_freq``, each ``[seq, d_model / 2]``."""
        phase = op.Mul(op.Unsqueeze(positions, [1]), _float(op, self.inv_freq[None], like))
        return op.Sin(phase), op.Cos(phase)

    def forward(self, op, query, key, q_tokens: Tokens, k_tokens: Tokens):
        q = op.Mul(self.heads(op, self.q_head(op, query)), _float(op, self.scale, query))
        k, v = self.heads(op, self.k_head(op, key)), self.heads(op, self.v_head(op, key))
        scale = _float(op, self.scale, query)

        def biased(bias):  # q + bias * scale, bias [heads, dim] -> [1, heads, 1, dim]
            return op.Add(q, op.Unsqueeze(op.Mul(bias, scale), [0, 2]))

        content = op.MatMul(biased(self.r_w_bias), op.Transpose(k, perm=[0, 1, 3, 2]))
        # position: qr [b, n, i, d_model] against [sin, cos](pos_i - pos_j), factorized
        kernel = op.Transpose(self.r_kernel, perm=[1, 2, 0])  # [heads, dim, d_model]
        qr = op.MatMul(biased(self.r_r_bias), kernel)
        qr_sin, qr_cos = op.Split(qr, num_outputs=2, axis=-1, _outputs=2)
        sin_q, cos_q = self.angles(op, q_tokens.positions, query)
        sin_k, cos_k = self.angles(op, k_tokens.positions, query)
        a = op.Add(op.Mul(qr_sin, sin_q), op.Mul(qr_cos, cos_q))  # multiplies cos_j
        b = op.Sub(op.Mul(qr_cos, sin_q), op.Mul(qr_sin, cos_q))  # multiplies sin_j
        position = op.MatMul(
            op.Concat(a, b, axis=-1), op.Transpose(op.Concat(cos_k, sin_k, axis=-1), perm=[1, 0])
        )  # [b, n, i, j]
        # token type: seg_embed[0] for different segments, [1] for the same (or <cls>)
        seg = op.Transpose(self.seg_embed, perm=[1, 2, 0])  # [heads, dim, 2]
        diff, same = op.Split(
            op.MatMul(biased(self.r_s_bias), seg), num_outputs=2, axis=-1, _outputs=2
        )
        cls = op.Constant(value=ir.tensor(CLS_TYPE, dtype=ir.DataType.INT64))
        q_types, k_types = (
            op.Unsqueeze(q_tokens.types, [1, 3]),
            op.Unsqueeze(k_tokens.types, [1, 2]),
        )
        same_type = op.Or(
            op.Equal(q_types, k_types), op.Or(op.Equal(q_types, cls), op.Equal(k_types, cls))
        )  # [b, 1, i, j]
        relative = op.Add(position, op.Where(same_type, same, diff))
        if self.separate_cls:  # no position or type term on the <cls> row and column
            rows = op.Range(0, op.Squeeze(_length(op, q, 2), [0]), 1)
            cols = op.Range(0, op.Squeeze(_length(op, k, 2), [0]), 1)
            zero = op.Constant(value_int=0)
            off_cls = op.And(
                op.Unsqueeze(op.Greater(rows, zero), [1]), op.Unsqueeze(op.Greater(cols, zero), [0])
            )
            relative = op.Mul(relative, op.CastLike(off_cls, relative))
        masked = op.Mul(op.Sub(_float(op, 1.0, query), k_tokens.mask), _float(op, INF, query))
        scores = op.Sub(op.Add(content, relative), op.Unsqueeze(masked, [1, 2]))
        context = op.MatMul(op.Softmax(scores, axis=-1), v)  # [b, n, i, dim]
        context = op.Reshape(op.Transpose(context, perm=[0, 2, 1, 3]), [0, 0, -1])
        return self.layer_norm(op, op.Add(query, self.post_proj(op, context)))


class FunnelPositionwiseFFN(nn.Module):
    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        self.linear_1 = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = get_activation(config.hidden_act)
        self.linear_2 = Linear(config.intermediate_size, config.hidden_size, bias=True)
        self.layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x):
        return self.layer_norm(op, op.Add(x, self.linear_2(op, self.act(op, self.linear_1(op, x)))))


class FunnelLayer(nn.Module):
    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        self.attention = FunnelRelMultiheadAttention(config)
        self.ffn = FunnelPositionwiseFFN(config)

    def forward(self, op, query, key, q_tokens: Tokens, k_tokens: Tokens):
        return self.ffn(op, self.attention(op, query, key, q_tokens, k_tokens))


class FunnelEmbeddings(nn.Module):
    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, input_ids):
        return self.layer_norm(op, self.word_embeddings(op, input_ids))


class FunnelEncoder(nn.Module):
    """The blocks; returns the last block's states and those after the first
    ``block_sizes[0]`` layer runs (what the decoder adds back)."""

    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [nn.ModuleList([FunnelLayer(config) for _ in range(n)]) for n in config.block_sizes]
        )
        self.repeats, self.pooling = config.block_repeats, Pooling(config)
        self.pool_q_only, self.first_runs = config.pool_q_only, config.block_sizes[0]

    def forward(self, op, x, tokens: Tokens):
        runs, first_block = 0, x
        for index, block in enumerate(self.blocks):
            for position, layer in enumerate(block):
                for repeat in range(self.repeats[index]):
                    if index > 0 and position == 0 and repeat == 0:  # the pooling run
                        pairs = self.pooling.indices(op, x)
                        pooled = self.pooling.pool(op, x, pairs, self.pooling.mode)
                        if self.pool_q_only:  # pooled queries, unpooled keys
                            q_tokens = self.pooling.tokens(op, tokens, pairs, pool_mask=False)
                            x = layer(op, pooled, x, q_tokens, tokens)
                            tokens = self.pooling.tokens(op, tokens, pairs, pool_mask=True)
                        else:
                            tokens = self.pooling.tokens(op, tokens, pairs, pool_mask=True)
                            x = layer(op, pooled, pooled, tokens, tokens)
                    else:
                        x = layer(op, x, x, tokens, tokens)
                    runs += 1
                    if runs == self.first_runs:
                        first_block = x
        return x, first_block


class FunnelDecoder(nn.Module):
    """Repeat the last block's tokens to the input length, add the first block's, run the layers."""

    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([FunnelLayer(config) for _ in range(config.num_decoder_layers)])
        self.stride = 2 ** (len(config.block_sizes) - 1)
        self.hidden_size = config.hidden_size
        self.separate_cls, self.truncate = config.separate_cls, config.truncate_seq

    def upsample(self, op, x, target):
        if self.stride == 1:
            return x
        cls = op.Slice(x, [0], [1], [1]) if self.separate_cls else None
        if cls is not None:
            x = op.Slice(x, [1], [np.iinfo(np.int64).max], [1])
        repeated = op.Expand(op.Unsqueeze(x, [2]), op.Constant(value_ints=[1, 1, self.stride, 1]))
        x = op.Reshape(repeated, op.Constant(value_ints=[0, -1, self.hidden_size]))
        if cls is None:
            return op.Slice(x, [0], _length(op, target), [1])
        if self.truncate:  # stride - 1 zero tokens at the end
            zeros = op.Expand(
                op.Mul(cls, _float(op, 0.0, x)), op.Constant(value_ints=[1, self.stride - 1, 1])
            )
            x = op.Concat(x, zeros, axis=1)
        x = op.Slice(x, [0], op.Sub(_length(op, target), op.Constant(value_ints=[1])), [1])
        return op.Concat(cls, x, axis=1)

    def forward(self, op, final, first_block, tokens: Tokens):
        x = op.Add(self.upsample(op, final, first_block), first_block)
        for layer in self.layers:
            x = layer(op, x, x, tokens, tokens)
        return x


class FunnelModel(nn.Module):
    """Embeddings, encoder, and the decoder where the head reads full-length states."""

    def __init__(self, config: FunnelConfig) -> None:
        super().__init__()
        self.embeddings = FunnelEmbeddings(config)
        self.encoder = FunnelEncoder(config)
        self.decoder = FunnelDecoder(config) if config.uses_decoder else None

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        length = op.Squeeze(_length(op, input_ids), [0])
        positions = op.CastLike(op.Range(0, length, 1), x)  # [seq]
        tokens = Tokens(positions, token_type_ids, op.CastLike(attention_mask, x))
        final, first_block = self.encoder(op, x, tokens)
        if self.decoder is None:  # FunnelBaseModel: the last block's (pooled) states
            return final
        return self.decoder(op, final, first_block, tokens)


class FunnelClassificationHead(nn.Module):
    """``linear_out(tanh(linear_hidden(x[:, 0])))``."""

    def __init__(self, hidden_size: int, num_labels: int) -> None:
        super().__init__()
        self.linear_hidden = Linear(hidden_size, hidden_size, bias=True)
        self.linear_out = Linear(hidden_size, num_labels, bias=True)

    def forward(self, op, x):
        return self.linear_out(op, op.Tanh(self.linear_hidden(op, first_token(op, x))))


class FunnelForFeatureExtraction(EncoderForFeatureExtraction):
    """``funnel.*`` and the head: ``lm_head`` (tied to the word embeddings unless untied),
    ``classifier`` or ``qa_outputs``. A bare ``FunnelModel``/``FunnelBaseModel`` checkpoint
    gets the ``funnel.`` prefix."""

    config_class = FunnelConfig
    uses_token_type_ids = True  # no type embeddings, but the relative attention reads them
    base_model_prefix = "funnel"
    model_class = FunnelModel
    head_names = ("lm_head", "classifier", "qa_outputs")
    pretraining_heads = ("discriminator_predictions",)  # ELECTRA-style pre-training
    optional_parts = ("decoder",)
    tied_copies = ("lm_head.weight",)

    def __init__(self, config: FunnelConfig) -> None:
        super().__init__(config)
        hidden, labels = config.hidden_size, config.num_labels
        if config.head == "masked-lm":
            embeddings = self.base_model.embeddings.word_embeddings
            tied = config.tie_word_embeddings
            self.lm_head = VocabProjection(hidden, config.vocab_size, embeddings, tied)
        elif config.head == "sequence-classification":
            self.classifier = FunnelClassificationHead(hidden, labels)
        elif config.head == "multiple-choice":  # one score per choice, on the pooled states
            self.classifier = FunnelClassificationHead(hidden, 1)
        elif config.head == "token-classification":
            self.classifier = Linear(hidden, labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.base_model(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        heads = (self.lm_head, self.classifier, self.qa_outputs)
        head = next((h for h in heads if h is not None), None)
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs


MODEL_TYPES = {"funnel": FunnelForFeatureExtraction}
