"""Parts shared by the BERT family of encoders: the heads and the registered class's skeleton.

BERT's descendants (RoBERTa, ELECTRA, ALBERT, RoFormer, ESM, ModernBERT...) put the
same heads under different names (``cls.predictions``, ``lm_head``,
``generator_lm_head``, ``vocab_projector``...), so each family declares the names
(:class:`EncoderForFeatureExtraction`) and these parts read them:

- :func:`first_token`, :func:`pool_first_or_mean` and :class:`ClassificationHead`:
  the sequence-level heads;
- :class:`VocabProjection`, :class:`MaskedLMHead` and :class:`DenseLMHead`: projections
  onto the vocabulary, tied to the word embeddings unless the config unties them;
- :class:`ResidualDense`: ``dense(x) + residual``, the block output of pre-norm variants.
"""

from __future__ import annotations

from typing import ClassVar

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, TransposedParameter, get_activation
from mobius.model import Model


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
