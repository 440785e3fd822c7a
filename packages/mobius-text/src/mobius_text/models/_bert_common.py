"""Parts shared by the BERT family of encoders: the heads and the registered class's skeleton.

BERT's descendants (RoBERTa, ELECTRA, ALBERT, RoFormer, ESM, ModernBERT...) put the
same heads under different names (``cls.predictions``, ``lm_head``,
``generator_lm_head``, ``vocab_projector``...), so each family declares the names
(:class:`EncoderForFeatureExtraction`) and these parts read them:

- :func:`first_token`, :func:`pool_first_or_mean`, :class:`ClassificationHead` and
  :class:`SequenceSummary`: the sequence-level heads;
- :class:`VocabProjection`, :class:`MaskedLMHead` and :class:`DenseLMHead`: projections
  onto the vocabulary, tied to the word embeddings unless the config unties them;
- :class:`ResidualDense`: ``dense(x) + residual``, the block output of pre-norm variants;
- :class:`DecoderCache` and :class:`EncoderAsCausalLM`: the same encoder run as a decoder
  (``is_decoder=True``: ``BertLMHeadModel``, ``RobertaForCausalLM``...), causal and cached.
"""

from __future__ import annotations

from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    TransposedParameter,
    attention_bias,
    get_activation,
    merge_heads,
    module_scope,
    scaled_dot_product_attention,
    split_heads,
)
from mobius.errors import ConfigError
from mobius.model import Model

#: The heads on the whole sequence's summary (the pooled first token in BERT's family).
POOLED_HEADS = ("sequence-classification", "multiple-choice")


def first_token(op, x):
    """``x[:, 0]``, ``[batch, hidden]``: the first token's state (``[CLS]``, ``<s>``)."""
    return op.Gather(x, op.Constant(value_int=0), axis=1)


def pool_first_or_mean(op, hidden, attention_mask, mode: str):
    """``[batch, hidden]``: the first token (``"cls"``), or the mean over real tokens (no clamp, as HF)."""
    if mode == "cls":
        return first_token(op, hidden)
    mask = op.Unsqueeze(op.CastLike(attention_mask, hidden), [2])  # [batch, seq, 1]
    return op.Div(
        op.ReduceSum(op.Mul(hidden, mask), [1], keepdims=0), op.ReduceSum(mask, [1], keepdims=0)
    )


class ClassificationHead(nn.Module):
    """``out_proj(act(dense(x[:, 0])))``: sequence classification on the first token.

    RoBERTa and ESM use tanh (BERT's pooler folded into the head), ELECTRA GELU,
    RoFormer and ConvBERT the config's activation.
    """

    def __init__(self, hidden_size: int, num_labels: int, act: str) -> None:
        super().__init__()
        self.dense = Linear(hidden_size, hidden_size, bias=True)
        self.act = get_activation(act)
        self.out_proj = Linear(hidden_size, num_labels, bias=True)

    def forward(self, op, x):
        return self.out_proj(op, self.act(op, self.dense(op, first_token(op, x))))


class SequenceSummary(nn.Module):
    """``act(summary(state))`` of the first, last or mean state: transformers' sequence
    summary (XLM, Flaubert, ELECTRA, ConvBERT), ``summary`` absent where ``width`` is None.

    ``kind`` is ``first``, ``last`` (also ``cls_index`` without an index) or ``mean``
    (over every position, pads included, as transformers does).
    """

    def __init__(self, hidden_size: int, width: int | None, act: str | None, kind: str) -> None:
        super().__init__()
        self.summary = Linear(hidden_size, width, bias=True) if width else None
        self.act = get_activation(act) if act else None
        self.kind = kind

    def forward(self, op, x):
        if self.kind == "mean":
            state = op.ReduceMean(x, [1], keepdims=0)
        else:
            index = 0 if self.kind == "first" else -1
            state = op.Gather(x, op.Constant(value_int=index), axis=1)  # [batch, hidden]
        if self.summary is not None:
            state = self.summary(op, state)
        return self.act(op, state) if self.act is not None else state


def summary_fields(hf_config: Any) -> dict[str, Any]:
    """:class:`SequenceSummary`'s arguments (``summary_type``, ``summary_width``,
    ``summary_activation``) from the config's ``summary_*`` fields, read as transformers
    reads them: where a config has none, the last state, no projection, no activation."""
    kind = getattr(hf_config, "summary_type", "last")
    if kind not in ("first", "last", "mean", "cls_index"):
        raise ConfigError(f"summary_type {kind!r} is not built")
    act = getattr(hf_config, "summary_activation", None)
    if act is not None and not isinstance(act, str):
        raise ConfigError(f"summary_activation must be a string or null; got {act!r}")
    width = None
    if getattr(hf_config, "summary_use_proj", False):
        to_labels = getattr(hf_config, "summary_proj_to_labels", False)
        width = hf_config.num_labels if to_labels and hf_config.num_labels > 0 else None
        width = width or hf_config.hidden_size
    return dict(summary_type=kind, summary_width=width, summary_activation=act or None)


class VocabProjection(nn.Module):
    """``x @ weight + bias`` onto the vocabulary, ``weight`` the word embeddings when tied.

    Untied, it reads like a ``Linear`` (the checkpoint's ``weight [vocab, in]``);
    tied, the checkpoint's ``weight`` is a copy of the embeddings and stays unread.
    """

    def __init__(
        self, in_features: int, vocab_size: int, embeddings: Embedding, tied: bool, bias=True
    ) -> None:
        super().__init__()
        self.weight = None if tied else TransposedParameter(vocab_size, in_features)
        self.bias = nn.Parameter([vocab_size]) if bias else None
        object.__setattr__(self, "embeddings", embeddings)  # owned by the encoder's embeddings

    def forward(self, op, x):
        table = self.weight
        if table is None:
            table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [in, vocab]
        logits = op.MatMul(x, table)
        return op.Add(logits, self.bias) if self.bias is not None else logits


class MaskedLMHead(nn.Module):
    """Base of the masked-LM heads that keep ``bias`` beside an optional ``decoder``.

    Tied, the logits are ``x @ embeddings.T + bias``. Untied (``tie_word_embeddings
    =False``), transformers unties the bias too: the ``decoder`` Linear has its own
    weight and bias, and ``bias`` is left unread. Subclasses add the layers before
    :meth:`decode`.
    """

    def __init__(self, width: int, vocab_size: int, embeddings: Embedding, tied: bool) -> None:
        super().__init__()
        if tied:
            self.bias, self.decoder = nn.Parameter([vocab_size]), None
        else:
            self.bias, self.decoder = None, Linear(width, vocab_size, bias=True)
        object.__setattr__(self, "embeddings", embeddings)  # owned by the encoder's embeddings

    def decode(self, op, x):
        """The logits ``[..., vocab]`` of the transformed states ``x [..., width]``."""
        if self.decoder is not None:
            return self.decoder(op, x)
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [width, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


class DenseLMHead(MaskedLMHead):
    """``decode(LayerNorm(act(dense(x))))``, ``dense`` narrowing to ``width`` (ALBERT, RemBERT).

    ``width`` is ALBERT's embedding size or RemBERT's output embedding size; the
    layers sit in the head itself, where BERT's sit in a ``transform``.
    """

    def __init__(self, config, width: int, embeddings: Embedding, tied: bool) -> None:
        super().__init__(width, config.vocab_size, embeddings, tied)
        self.dense = Linear(config.hidden_size, width, bias=True)
        self.act = get_activation(config.hidden_act)
        self.LayerNorm = LayerNorm(width, config.layer_norm_eps)

    def forward(self, op, x):
        return self.decode(op, self.LayerNorm(op, self.act(op, self.dense(op, x))))


class ResidualDense(nn.Module):
    """``dense(x) + residual``: the un-normalised block output of pre-norm variants."""

    def __init__(self, in_features: int, hidden_size: int) -> None:
        super().__init__()
        self.dense = Linear(in_features, hidden_size, bias=True)

    def forward(self, op, x, residual):
        return op.Add(self.dense(op, x), residual)


class EncoderForFeatureExtraction(Model):
    """An encoder under :attr:`base_model_prefix` and the heads its config builds.

    Heads are top-level modules (:attr:`head_names`), ``None`` where the config's
    head does not use them; the checkpoint tensors no graph reads follow from the
    class attributes below, and a bare base-model checkpoint gets the prefix.
    """

    task = "feature-extraction"
    #: the encoder's attribute and checkpoint prefix (``bert``); variants rename it
    base_model_prefix: ClassVar[str]
    model_class: ClassVar[type[nn.Module]]
    #: the heads' top-level modules, which are also their checkpoint prefixes
    head_names: ClassVar[tuple[str, ...]] = ()
    #: checkpoint prefixes of heads never built (pre-training objectives)
    pretraining_heads: ClassVar[tuple[str, ...]] = ()
    #: encoder modules that only some heads build (BERT's pooler), unread elsewhere
    optional_parts: ClassVar[tuple[str, ...]] = ()
    #: encoder tensors no graph reads (position buffers), as patterns under the prefix
    unread: ClassVar[tuple[str, ...]] = ()
    #: with tied word embeddings: the checkpoint's copies of them (a decoder's weight)
    tied_copies: ClassVar[tuple[str, ...]] = ()
    #: without: the tensors an untied decoder replaces (BERT's head bias)
    untied_unused: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        setattr(self, self.base_model_prefix, self.model_class(config))
        for name in self.head_names:
            setattr(self, name, None)  # the subclass builds those its config's head uses

    @property
    def base_model(self) -> nn.Module:
        return getattr(self, self.base_model_prefix)

    @property
    def ignored(self) -> tuple[str, ...]:
        """Checkpoint tensors no graph of this head reads (buffers, other heads, tied copies)."""
        prefix, encoder = self.base_model_prefix, self.base_model
        ignored = [f"{prefix}.{pattern}" for pattern in self.unread]
        ignored += [
            f"{prefix}.{name}.*" for name in self.optional_parts if getattr(encoder, name) is None
        ]
        ignored += [f"{name}.*" for name in self.pretraining_heads]
        ignored += [f"{name}.*" for name in self.head_names if getattr(self, name) is None]
        ignored += self.tied_copies if self.config.tie_word_embeddings else self.untied_unused
        return tuple(ignored)

    def sanitize(self, weights: dict) -> dict:
        """A bare base-model checkpoint (no head) gets the ``<base_model_prefix>.`` prefix."""
        prefix = self.base_model_prefix
        kept = tuple(f"{name}." for name in (prefix, *self.head_names, *self.pretraining_heads))
        return {k if k.startswith(kept) else f"{prefix}.{k}": v for k, v in weights.items()}


class DecoderCache:
    """What an encoder's layers pass to their self-attention when the encoder runs as a decoder.

    It goes where the encoder passes its padding bias, so every family's layers carry it
    unchanged; the self-attention hands it ``q``, ``k`` and ``v`` (:meth:`attend`). It
    holds the causal-and-padding mask and the layers' caches, which it reads in layer
    order (the layers run in order), and collects the present ones.
    """

    def __init__(self, attention_mask, bias, past_key_values) -> None:
        self.attention_mask, self.bias = attention_mask, bias
        self.presents: list[tuple] = []
        self._past = iter(past_key_values)

    def positions(self, op, input_ids):
        """``[batch, seq]``: ``past, past + 1...`` on every row, ``past`` the tokens before these.

        Counted on the mask, not on the cache: a runtime's shared buffers (ORT GenAI's)
        hold the cache at its full length.
        """
        total = op.Squeeze(op.Shape(self.attention_mask, start=1, end=2), [0])
        seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Unsqueeze(op.Range(op.Sub(total, seq), total, 1), [0])  # [1, seq]
        return op.Expand(positions, op.Shape(input_ids))

    def attend(self, op, q, k, v, num_heads: int, scale: float):
        """Causal attention of the next layer over its cache; ``q``, ``k``, ``v`` and the result
        ``[batch, seq, heads*dim]``."""
        past_key, past_value = next(self._past)
        head_dim = past_key.shape[3]
        q, k, v = (split_heads(op, t, num_heads, head_dim) for t in (q, k, v))
        y, key, value = scaled_dot_product_attention(
            op, q, k, v, self.bias, past_key, past_value,
            num_heads=num_heads, num_kv_heads=num_heads, head_dim=head_dim, scale=scale,
        )  # fmt: skip
        self.presents.append((key, value))
        return merge_heads(op, y)


class DecoderConfig:
    """Mixin of an encoder family's config for its causal LM: ``is_decoder`` required, the
    masked-LM head built as the LM head."""

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if not getattr(hf_config, "is_decoder", False):
            raise ConfigError(
                f"{hf_config.model_type} as a causal LM needs is_decoder=True (without it "
                "transformers' model attends both ways: build it as an encoder)"
            )
        if getattr(hf_config, "add_cross_attention", False):
            raise ConfigError(
                f"{hf_config.model_type} with add_cross_attention=True is the decoder of an "
                "encoder-decoder; mobius builds it as a causal LM only without cross-attention"
            )
        return {**super().hf_fields(hf_config), "head": "masked-lm"}


class EncoderAsCausalLM:
    """Mixin of an encoder family's model class (before it in the bases) for ``is_decoder=True``.

    transformers' ``*ForCausalLM`` of an encoder family is the encoder with causal
    self-attention over a KV cache and the masked-LM head as LM head: the checkpoint
    is the masked-LM model's (:attr:`lm_head_name` the head's prefix), token types are
    all 0, and learned positions are read at ``position_ids`` (transformers' ``generate``
    feeds them). The family's self-attention calls :meth:`DecoderCache.attend`.
    """

    task = "causal-lm"
    #: the masked-LM head's attribute and checkpoint prefix
    lm_head_name: ClassVar[str] = "lm_head"

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.num_attention_heads, c.head_dim, c.head_dim)] * c.num_hidden_layers

    def embed(self, op, input_ids, position_ids):
        """The encoder's input ``[batch, seq, hidden]``, in the base model's scope (token type 0)."""
        return self.base_model.embeddings(op, input_ids, None, position_ids)

    def decoder_states(self, op, x):
        """The encoder's output as the head reads it (a variant's final norm outside it)."""
        return x

    def encode(self, op, x, cache: DecoderCache, input_ids):
        """The encoder on ``x`` with ``cache`` where it takes its padding bias."""
        return self.base_model.encoder(op, x, cache)

    def logits(self, op, x):
        return getattr(self, self.lm_head_name)(op, x)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        base = self.base_model
        with module_scope(op, base):  # the encoder's parts keep their names (``bert.encoder...``)
            x = self.embed(op, input_ids, position_ids)  # [batch, seq, hidden]
            seq_len = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
            bias = attention_bias(op, attention_mask, seq_len, x.dtype)
            cache = DecoderCache(attention_mask, bias, past_key_values)
            x = self.decoder_states(op, self.encode(op, x, cache, input_ids))
        return self.logits(op, x), cache.presents
