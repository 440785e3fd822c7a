"""The feature-extraction contract of encoder models (ORT and Optimum read these names).

Inputs: ``input_ids`` and ``attention_mask`` int64 [batch, sequence], and
``token_type_ids`` int64 [batch, sequence] where the model has token types.
Outputs: ``last_hidden_state`` [batch, sequence, hidden], and by the head chosen
at build time (``config.head``):

- ``masked-lm``: ``logits`` [batch, sequence, vocab];
- ``sequence-classification``: ``logits`` [batch, num_labels];
- ``token-classification``: ``logits`` [batch, sequence, num_labels];
- ``sentence-embedding``: ``sentence_embedding`` [batch, hidden], pooled over the
  real tokens (``config.pooling``: mean, cls or max), L2-normalised when
  ``config.normalize``.

A family may add outputs of its own, declared with their shapes by the module's
``output_shapes()`` (CLIP's text tower: ``pooler_output``, ``text_embeds``).

The module returns a dict of its outputs (``last_hidden_state`` and ``logits``
when its head has weights); the sentence embedding is pooled here, for every family.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.components._encoder import pool_tokens
from mobius.errors import ConfigError
from mobius.options import ENCODER_HEADS, POOLING_MODES
from mobius.tasks._base import IR_VERSION, ModelTask, set_output

INT64 = ir.DataType.INT64


def logits_shape(config) -> list:
    """The ``logits`` shape of the config's head."""
    if config.head == "masked-lm":
        return ["batch", "sequence", config.vocab_size]
    if config.head == "sequence-classification":
        return ["batch", config.num_labels]
    return ["batch", "sequence", config.num_labels]


# A checkpoint's architecture class names its head: what ``--head auto`` builds.
_HEAD_OF_ARCHITECTURE = {
    "ForMaskedLM": "masked-lm",
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
}


def encoder_head(options, hf_config, defaults: dict) -> dict:
    """The head, pooling and normalisation of an encoder build (``--head``, ``--pooling``...).

    ``head="auto"`` reads the checkpoint: a source that sets defaults (a
    sentence-transformers directory: head, pooling, normalize) gives them;
    otherwise the architecture class decides (``*ForMaskedLM``: masked-lm; a bare
    encoder: none). Explicit options win over the source's defaults.
    """
    head = options.head
    if head not in ("auto", *ENCODER_HEADS):
        raise ConfigError(f"unknown head {head!r}; choose auto or {', '.join(ENCODER_HEADS)}")
    if head == "auto":
        architecture = next(iter(getattr(hf_config, "architectures", None) or []), "") or ""
        suffix = next((s for s in _HEAD_OF_ARCHITECTURE if architecture.endswith(s)), None)
        head = defaults.get("head") or _HEAD_OF_ARCHITECTURE.get(suffix, "none")
    pooling = options.pooling or defaults.get("pooling", "mean")
    if pooling not in POOLING_MODES:
        raise ConfigError(f"unknown pooling {pooling!r}; choose {', '.join(POOLING_MODES)}")
    normalize = options.normalize
    if normalize is None:
        normalize = bool(defaults.get("normalize", False))
    return dict(head=head, pooling=pooling, normalize=normalize)


class FeatureExtractionTask(ModelTask):
    """Encoder outputs; the module takes ``(input_ids, attention_mask, token_type_ids)``."""

    name = "feature-extraction"

    def configure(self, config, options, source):
        """Apply ``--head``, ``--pooling`` and ``--normalize`` (see :func:`encoder_head`)."""
        return dataclasses.replace(
            config, **encoder_head(options, source.hf_config, source.defaults)
        )

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("feature_extraction")
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "sequence"])
        token_type_ids = None
        if module.uses_token_type_ids:
            token_type_ids = builder.input("token_type_ids", INT64, ["batch", "sequence"])

        outputs = module(builder.op, input_ids, attention_mask, token_type_ids)

        hidden = outputs["last_hidden_state"]
        set_output(
            builder, hidden, "last_hidden_state", dtype, ["batch", "sequence", config.hidden_size]
        )
        if "logits" in outputs:
            set_output(builder, outputs["logits"], "logits", dtype, logits_shape(config))
        # Outputs a family adds, with their shapes (CLIP's pooler_output and text_embeds).
        extra = module.output_shapes()
        for name, shape in extra.items():
            set_output(builder, outputs[name], name, dtype, shape)
        if config.head == "sentence-embedding":
            embedding = pool_tokens(
                builder.op, hidden, attention_mask, config.pooling, config.normalize
            )
            set_output(
                builder, embedding, "sentence_embedding", dtype, ["batch", config.hidden_size]
            )
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
