"""BigBird with ``attention_type="original_full"``: BERT's post-norm encoder with full attention.

What differs from BERT:

- ``use_bias`` switches the q/k/v biases; ``rescale_embeddings`` multiplies the word
  embeddings by ``hidden_size ** 0.5``;
- the pooler (``bert.pooler``, a bare Linear) is read by multiple choice only:
  sequence classification is ``classifier.dense``, ``hidden_act``, ``out_proj`` on the
  first token (RoFormer's head);
- question answering is not built (its head masks the question's tokens).

Block-sparse attention is refused: transformers falls back to full attention only for
sequences up to ``(5 + 2 * num_random_blocks) * block_size`` tokens, so a graph built
with full attention would silently differ on longer inputs. A checkpoint whose
``config.json`` says ``"attention_type": "original_full"`` builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    BertLayer,
    BertModel,
    BertSelfAttention,
)


@dataclass
class BigBirdConfig(BertConfig):
    """BERT's fields plus the q/k/v bias switch and the embedding rescale."""

    use_bias: bool = True
    rescale_embeddings: bool = False

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
        }


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


class BigBirdForFeatureExtraction(BertForFeatureExtraction):
    """BERT's tree (``bert.*``, ``cls.predictions``, ``classifier``); only multiple choice reads
    ``bert.pooler``."""

    config_class = BigBirdConfig
    model_class = BigBirdModel

    def __init__(self, config: BigBirdConfig) -> None:
        if config.head == "question-answering":  # masks the question's tokens out of the span
            raise ConfigError(
                "--head question-answering is not built for big_bird: its span head masks "
                "the question by sep_token_id"
            )
        super().__init__(config)

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
