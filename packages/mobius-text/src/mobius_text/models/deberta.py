"""DeBERTa: disentangled attention over relative positions, post-norm layers, optional heads.

Each score adds to ``q·k`` a content-to-position term (``c2p``: the query against the
projected embedding of the distance ``i - j``) and a position-to-content one (``p2c``:
the key against the projected embedding of ``j - i``). Masking follows transformers:
the pair mask ``mask[i] & mask[j]`` fills scores with the lowest value (a padded row
attends uniformly), and padded embeddings are zeroed. The module tree follows
``Deberta*`` checkpoints (``deberta.*``, ``cls.*`` or ``lm_predictions.*``,
``pooler.*``, ``classifier``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    RelativeEmbeddings,
    c2p_scores,
    float_constant,
    get_activation,
    masked_softmax_attention,
    p2c_scores,
    positions_as_keys,
    relative_positions,
    sequence_length,
)
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import EncoderForFeatureExtraction, first_token
from mobius_text.models.bert import (
    BertIntermediate,
    BertOnlyMLMHead,
    BertPredictionHeadTransform,
    BertResidualOutput,
)


@dataclass
class DebertaConfig(EncoderConfig):
    embedding_size: int = 0  # the width of the token embeddings (hidden_size unless set)
    position_biased_input: bool = True  # absolute positions added to the embeddings
    relative_attention: bool = False
    max_relative_positions: int = 512
    pos_att_type: tuple[str, ...] = ()  # "c2p", "p2c"
    pooler_hidden_act: str = "gelu"
    legacy: bool = True  # the masked-LM head: cls.predictions (legacy) or lm_predictions

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "talking_head", False):
            raise ConfigError("talking_head DeBERTa attention is not built")
        fields = super().hf_fields(hf_config)
        kinds = getattr(hf_config, "pos_att_type", None) or []
        if isinstance(kinds, str):
            kinds = [k.strip() for k in kinds.lower().split("|")]
        max_relative = getattr(hf_config, "max_relative_positions", -1) or -1
        fields.update(
            embedding_size=getattr(hf_config, "embedding_size", None) or fields["hidden_size"],
            position_biased_input=bool(getattr(hf_config, "position_biased_input", True)),
            relative_attention=bool(getattr(hf_config, "relative_attention", False)),
            max_relative_positions=(
                max_relative if max_relative >= 1 else fields["max_position_embeddings"]
            ),
            pos_att_type=tuple(kinds),
            pooler_hidden_act=getattr(hf_config, "pooler_hidden_act", "gelu"),
            legacy=bool(getattr(hf_config, "legacy", True)),
        )
        pooler_size = getattr(hf_config, "pooler_hidden_size", fields["hidden_size"])
        if pooler_size != fields["hidden_size"]:
            raise ConfigError(f"pooler_hidden_size {pooler_size} differs from hidden_size")
        return fields


class DisentangledSelfAttention(nn.Module):
    """Scores ``q·k + c2p + p2c`` over ``sqrt(dim * (1 + len(pos_att_type)))``; fused ``in_proj``."""

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.in_proj = Linear(hidden, 3 * hidden, bias=False)  # per head: q | k | v
        self.q_bias = nn.Parameter([hidden])
        self.v_bias = nn.Parameter([hidden])
        self.kinds = config.pos_att_type if config.relative_attention else ()
        self.pos_proj = Linear(hidden, hidden) if "c2p" in self.kinds else None
        self.pos_q_proj = Linear(hidden, hidden, bias=True) if "p2c" in self.kinds else None
        self.num_heads, self.max_relative = heads, config.max_relative_positions
        self.heads = (heads, config.head_dim)
        scale_factor = 1 + len(config.pos_att_type)
        self.scale = float(np.sqrt(np.float32(config.head_dim * scale_factor)))

    def forward(self, op, x, pair_mask, rel_pos, rel_embeddings):
        heads = self.num_heads
        qkv = op.Transpose(op.Reshape(self.in_proj(op, x), [0, 0, heads, -1]), perm=[0, 2, 1, 3])
        q, k, v = op.Split(qkv, axis=-1, num_outputs=3, _outputs=3)  # each [b, h, n, d]
        q = op.Add(q, op.Reshape(self.q_bias, [heads, 1, -1]))
        v = op.Add(v, op.Reshape(self.v_bias, [heads, 1, -1]))
        q = op.Div(q, float_constant(op, self.scale, q))
        scores = op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2]))  # [b, h, n, n]
        if self.kinds:
            scores = op.Add(scores, self.relative_scores(op, q, k, rel_pos, rel_embeddings))
        return masked_softmax_attention(op, scores, pair_mask, v)

    def relative_scores(self, op, q, k, rel_pos, rel_embeddings):
        """c2p + p2c over the distances within ``span = min(seq, max_relative_positions)``."""
        span = op.Min(sequence_length(op, rel_pos), op.Constant(value_int=self.max_relative))
        centre = op.Constant(value_int=self.max_relative)
        window = op.Slice(
            rel_embeddings,
            op.Unsqueeze(op.Sub(centre, span), [0]),
            op.Unsqueeze(op.Add(centre, span), [0]),
            [0],
        )  # [2*span, hidden]
        top = op.Sub(op.Mul(span, op.Constant(value_int=2)), op.Constant(value_int=1))
        score = None
        if self.pos_proj is not None:
            pos_key = positions_as_keys(op, self.pos_proj(op, window), *self.heads)
            score = c2p_scores(op, q, pos_key, rel_pos, span, top)
        if self.pos_q_proj is not None:
            pos_query = op.Div(self.pos_q_proj(op, window), float_constant(op, self.scale, q))
            pos_query = positions_as_keys(op, pos_query, *self.heads)
            p2c = p2c_scores(op, k, pos_query, rel_pos, span, top)
            score = p2c if score is None else op.Add(score, p2c)
        return score


class DebertaAttention(nn.Module):
    attention_class = DisentangledSelfAttention

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        self.self = self.attention_class(config)
        self.output = BertResidualOutput(
            config.hidden_size, config.hidden_size, config.layer_norm_eps
        )

    def forward(self, op, x, pair_mask, rel_pos, rel_embeddings):
        return self.output(op, self.self(op, x, pair_mask, rel_pos, rel_embeddings), x)


class DebertaLayer(nn.Module):
    attention_class = DebertaAttention

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        self.attention = self.attention_class(config)
        self.intermediate = BertIntermediate(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )
        self.output = BertResidualOutput(
            config.intermediate_size, config.hidden_size, config.layer_norm_eps
        )

    def forward(self, op, x, pair_mask, rel_pos, rel_embeddings):
        x = self.attention(op, x, pair_mask, rel_pos, rel_embeddings)
        return self.output(op, self.intermediate(op, x), x)


class DebertaEncoder(nn.Module):
    layer_class = DebertaLayer

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(
            [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        )
        self.rel_embeddings = (
            RelativeEmbeddings(self.relative_table_size(config), config.hidden_size)
            if config.relative_attention
            else None
        )

    @staticmethod
    def relative_table_size(config: DebertaConfig) -> int:
        return 2 * config.max_relative_positions

    def relative_inputs(self, op, x):
        """``(rel_pos [seq, seq], rel_embeddings)`` shared by every layer (None without them)."""
        if self.rel_embeddings is None:
            return None, None
        return relative_positions(op, sequence_length(op, x)), self.rel_embeddings(op)

    def forward(self, op, x, pair_mask, token_mask):
        rel_pos, rel_embeddings = self.relative_inputs(op, x)
        for layer in self.layer:
            x = layer(op, x, pair_mask, rel_pos, rel_embeddings)
        return x


class DebertaEmbeddings(nn.Module):
    """Tokens (+ absolute positions) (+ token types), projected to hidden_size, normalised, pads zeroed."""

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        width = config.embedding_size
        self.word_embeddings = Embedding(config.vocab_size, width)
        self.position_embeddings = (
            Embedding(config.max_position_embeddings, width)
            if config.position_biased_input
            else None
        )
        self.token_type_embeddings = (
            Embedding(config.type_vocab_size, width) if config.type_vocab_size else None
        )
        self.embed_proj = Linear(width, config.hidden_size) if width != config.hidden_size else None
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, input_ids, token_type_ids, token_mask):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, embedding_size]
        if self.position_embeddings is not None:
            positions = op.Unsqueeze(op.Range(0, sequence_length(op, input_ids), 1), [0])
            x = op.Add(x, self.position_embeddings(op, positions))
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embeddings(op, token_type_ids))
        if self.embed_proj is not None:
            x = self.embed_proj(op, x)
        return op.Mul(self.LayerNorm(op, x), op.CastLike(token_mask, x))


class DebertaModel(nn.Module):
    embeddings_class, encoder_class = DebertaEmbeddings, DebertaEncoder

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        real = op.Cast(attention_mask, to=ir.DataType.BOOL)
        pair_mask = op.And(op.Unsqueeze(real, [1, 3]), op.Unsqueeze(real, [1, 2]))  # [b, 1, n, n]
        token_mask = op.Unsqueeze(attention_mask, [2])  # [b, n, 1]
        x = self.embeddings(op, input_ids, token_type_ids, token_mask)
        return self.encoder(op, x, pair_mask, token_mask)


class DebertaLMPredictionHead(BertPredictionHeadTransform):
    """``lm_predictions.lm_head`` (``legacy=False``): the transform, then always the word embeddings + ``bias``."""

    def __init__(self, config: DebertaConfig, embeddings: Embedding) -> None:
        if config.embedding_size != config.hidden_size:
            raise ConfigError(
                "the non-legacy DeBERTa masked-LM head needs embedding_size == hidden_size"
            )
        super().__init__(config)
        self.bias = nn.Parameter([config.vocab_size])
        object.__setattr__(self, "embeddings", embeddings)

    def forward(self, op, x):
        x = super().forward(op, x)
        return op.Add(op.MatMul(x, op.Transpose(self.embeddings.weight, perm=[1, 0])), self.bias)


class DebertaOnlyMLMHead(nn.Module):
    def __init__(self, config: DebertaConfig, embeddings: Embedding) -> None:
        super().__init__()
        self.lm_head = DebertaLMPredictionHead(config, embeddings)

    def forward(self, op, x):
        return self.lm_head(op, x)


class ContextPooler(nn.Module):
    """``act(dense(x[:, 0]))`` with ``pooler_hidden_act``: the input of sequence classification."""

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.act = get_activation(config.pooler_hidden_act)

    def forward(self, op, x):
        return self.act(op, self.dense(op, first_token(op, x)))


class DebertaForFeatureExtraction(EncoderForFeatureExtraction):
    """The DeBERTa encoder and the head its config names (see :class:`mobius.config.EncoderConfig`).

    masked-lm is ``cls.predictions`` (BERT's, its transform narrowing to
    ``embedding_size``) for ``legacy`` configs, ``lm_predictions.lm_head`` otherwise.
    """

    config_class = DebertaConfig
    uses_token_type_ids = True
    base_model_prefix = "deberta"
    model_class = DebertaModel
    head_names = ("cls", "lm_predictions", "pooler", "classifier", "qa_outputs")
    tied_copies = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
    untied_unused = ("cls.predictions.bias",)

    def __init__(self, config: DebertaConfig) -> None:
        super().__init__(config)
        self.uses_token_type_ids = config.type_vocab_size > 0
        words = self.deberta.embeddings.word_embeddings
        if config.head == "masked-lm" and config.legacy:
            self.cls = BertOnlyMLMHead(config, words, width=config.embedding_size)
        elif config.head == "masked-lm":
            self.lm_predictions = DebertaOnlyMLMHead(config, words)
        elif config.head in ("sequence-classification", "token-classification"):
            if config.head == "sequence-classification":
                self.pooler = ContextPooler(config)
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)
        elif config.head == "multiple-choice":
            self.pooler, self.classifier = self.choice_head(config)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(config.hidden_size, config.num_labels, bias=True)

    def choice_head(self, config: DebertaConfig) -> tuple[nn.Module, nn.Module]:
        """``pooler`` and ``classifier`` of multiple choice, which only DeBERTa-v2 has."""
        raise ConfigError("--head multiple-choice is not built for deberta: transformers has none")

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.deberta(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        head = self.cls or self.lm_predictions or self.qa_outputs
        if head is not None:
            outputs["logits"] = head(op, hidden)
        elif self.classifier is not None:
            pooled = hidden if self.pooler is None else self.pooler(op, hidden)
            outputs["logits"] = self.classifier(op, pooled)
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        """The family's, and the position embeddings of relative-only configs."""
        ignored = super().ignored
        if self.deberta.embeddings.position_embeddings is None:
            ignored += ("deberta.embeddings.position_embeddings.*",)
        return ignored


MODEL_TYPES = {"deberta": DebertaForFeatureExtraction}
