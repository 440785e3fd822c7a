"""BigBird with ``attention_type="original_full"``: BERT's post-norm encoder with full attention.

What differs from BERT:

- ``use_bias`` switches the q/k/v biases; ``rescale_embeddings`` multiplies the word
  embeddings by ``hidden_size ** 0.5``;
- the pooler (``bert.pooler``, a bare Linear) is read by multiple choice only:
  sequence classification is ``classifier.dense``, ``hidden_act``, ``out_proj`` on the
  first token (RoFormer's head);
- question answering runs ``qa_classifier`` (BERT's feed-forward block, then ``qa_outputs``)
  and takes the question out of the span: the tokens after the first and up to the
  first ``sep_token_id`` score ``-1e6`` less, as transformers masks them.

Block-sparse attention is refused: transformers falls back to full attention only for
sequences up to ``(5 + 2 * num_random_blocks) * block_size`` tokens, so a graph built
with full attention would silently differ on longer inputs. A checkpoint whose
``config.json`` says ``"attention_type": "original_full"`` builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    ClassificationHead,
    DecoderConfig,
    EncoderAsCausalLM,
    first_token,
)
from mobius_text.models.bert import (
    BertAttention,
    BertConfig,
    BertEmbeddings,
    BertEncoder,
    BertForFeatureExtraction,
    BertIntermediate,
    BertLayer,
    BertModel,
    BertResidualOutput,
    BertSelfAttention,
)

INT64 = ir.DataType.INT64


@dataclass
class BigBirdConfig(BertConfig):
    """BERT's fields plus the q/k/v bias switch and the embedding rescale."""

    use_bias: bool = True
    rescale_embeddings: bool = False
    sep_token_id: int = 66

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        kind = getattr(hf_config, "attention_type", "block_sparse")
        # a decoder (with its cache) attends in full whatever the config says, as transformers
        decoder = issubclass(cls, DecoderConfig)
        if kind != "original_full" and not decoder:
            raise ConfigError(
                f"attention_type {kind!r} is not built; only 'original_full' (transformers "
                "itself uses full attention for short sequences only: set attention_type="
                "'original_full' in config.json to build full attention at every length)"
            )
        if getattr(hf_config, "is_decoder", False) and not decoder:
            raise ConfigError(
                "is_decoder=True is a causal LM: its checkpoint's class is BigBirdForCausalLM"
            )
        return {
            **super().hf_fields(hf_config),
            "use_bias": bool(hf_config.use_bias),
            "rescale_embeddings": bool(hf_config.rescale_embeddings),
            "sep_token_id": _token_id(getattr(hf_config, "sep_token_id", 66)),
        }


def _token_id(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"sep_token_id must be a token id; got {value!r}")
    return value


class BigBirdEmbeddings(BertEmbeddings):
    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__(config)
        self.scale = config.hidden_size**0.5 if config.rescale_embeddings else None

    def forward(self, op, input_ids, token_type_ids, position_ids=None):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        if self.scale is not None:
            x = op.Mul(x, op.CastLike(op.Constant(value_float=self.scale), x))
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embedding(op, token_type_ids))
        if position_ids is None:
            position_ids = self.position_ids(op, input_ids)
        x = op.Add(x, self.position_embeddings(op, position_ids))
        return self.LayerNorm(op, x)


class BigBirdSelfAttention(BertSelfAttention):
    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__(config.hidden_size, config.num_attention_heads)
        hidden, bias = config.hidden_size, config.use_bias
        self.query = Linear(hidden, hidden, bias=bias)
        self.key = Linear(hidden, hidden, bias=bias)
        self.value = Linear(hidden, hidden, bias=bias)


class BigBirdLayer(BertLayer):
    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__(config, BertAttention(config, BigBirdSelfAttention(config)))


class BigBirdEncoder(BertEncoder):
    layer_class = BigBirdLayer


class BigBirdPooler(Linear):
    """``tanh(x[:, 0] @ weight + bias)``: BERT's pooler as a bare Linear (``bert.pooler.weight``)."""

    def forward(self, op, x):
        return op.Tanh(super().forward(op, first_token(op, x)))


class BigBirdModel(BertModel):
    embeddings_class = BigBirdEmbeddings
    encoder_class = BigBirdEncoder
    pooled = False  # the classification head reads the first token itself

    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__(config)
        if config.head == "multiple-choice":  # the one head that reads BERT's pooler
            self.pooler = BigBirdPooler(config.hidden_size, config.hidden_size, bias=True)


class BigBirdQuestionAnsweringHead(nn.Module):
    """``qa_outputs(output(intermediate(x), x))``: a post-norm feed-forward block, then the span."""

    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__()
        width, eps = config.intermediate_size, config.layer_norm_eps
        self.intermediate = BertIntermediate(config.hidden_size, width, config.hidden_act)
        self.output = BertResidualOutput(width, config.hidden_size, eps)
        self.qa_outputs = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, x):
        return self.qa_outputs(op, self.output(op, self.intermediate(op, x), x))


def question_penalty(op, input_ids, sep_token_id: int):
    """``[batch, seq, 1]``: 1e6 at the question's tokens (after the first, through the first
    ``sep_token_id``), else 0."""
    is_sep = op.Cast(op.Equal(input_ids, op.Constant(value_int=sep_token_id)), to=INT64)
    ends = op.Add(op.ArgMax(is_sep, axis=-1, keepdims=1), op.Constant(value_int=1))  # [b, 1]
    seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
    positions = op.Unsqueeze(op.Range(0, seq_len, 1), [0])  # [1, seq]
    inside = op.And(op.Less(positions, ends), op.Greater(positions, op.Constant(value_int=0)))
    penalty = op.Mul(op.CastLike(inside, op.Constant(value_float=1.0)), 1e6)
    return op.Unsqueeze(penalty, [-1])


class BigBirdForFeatureExtraction(BertForFeatureExtraction):
    """BERT's tree (``bert.*``, ``cls.predictions``, ``classifier``, ``qa_classifier``); only
    multiple choice reads ``bert.pooler``."""

    config_class = BigBirdConfig
    model_class = BigBirdModel
    head_names = (*BertForFeatureExtraction.head_names, "qa_classifier")

    def __init__(self, config: BigBirdConfig) -> None:
        super().__init__(config)
        if config.head == "question-answering":
            self.qa_outputs = None
            self.qa_classifier = BigBirdQuestionAnsweringHead(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        if self.config.head != "question-answering":
            return super().forward(op, input_ids, attention_mask, token_type_ids)
        hidden, _ = self.base_model(op, input_ids, attention_mask, token_type_ids)
        logits = self.qa_classifier(op, hidden)  # [batch, seq, 2]
        penalty = question_penalty(op, input_ids, self.config.sep_token_id)
        return {"last_hidden_state": hidden, "logits": op.Sub(logits, op.CastLike(penalty, logits))}

    def sequence_classifier(self, config: BigBirdConfig) -> nn.Module:
        """``classifier.dense``, the activation, ``out_proj`` on the first token (no pooler)."""
        return ClassificationHead(config.hidden_size, config.num_labels, config.hidden_act)


class BigBirdDecoderConfig(DecoderConfig, BigBirdConfig):
    pass


class BigBirdForCausalLM(EncoderAsCausalLM, BigBirdForFeatureExtraction):
    """BigBird as a causal LM: full causal attention over the cache, ``cls`` as the LM head."""

    config_class = BigBirdDecoderConfig
    lm_head_name = "cls"


MODEL_TYPES = {"big_bird": BigBirdForFeatureExtraction, "BigBirdForCausalLM": BigBirdForCausalLM}
