"""The feature-extraction contract of encoder models (ORT and Optimum read these names).

Inputs: ``input_ids`` and ``attention_mask`` int64 [batch, sequence], and
``token_type_ids`` int64 [batch, sequence] where the model has token types; then the
family's own (``Model.extra_inputs()``: LayoutLM's ``bbox`` [batch, sequence, 4]), passed
to the module by keyword (one named ``token_type_ids``, TAPAS's [batch, sequence, 7], takes
the contract's place where the module has none of those), and named in the graph's ``mobius.zeros_when_absent`` metadata
where transformers fills them with zeros when they are not given.
Outputs: ``last_hidden_state`` [batch, sequence, hidden], and by the head chosen
at build time (``config.head``):

- ``masked-lm``: ``logits`` [batch, sequence, vocab];
- ``sequence-classification``: ``logits`` [batch, num_labels];
- ``token-classification``: ``logits`` [batch, sequence, num_labels];
- ``question-answering``: ``start_logits`` and ``end_logits`` [batch, sequence], the
  answer span's scores (the module's ``logits`` [batch, sequence, 2] split here);
- ``multiple-choice``: every input is [batch, choices, sequence] and ``logits`` is
  [batch, choices]; the graph flattens the choices into the batch before the encoder
  (the module scores each row with one label) and ``last_hidden_state`` is
  [batch, choices, sequence, hidden];
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

#: The graph's metadata key naming the extra inputs transformers fills with zeros when absent.
ZEROS_WHEN_ABSENT = "mobius.zeros_when_absent"
INT64 = ir.DataType.INT64


def logits_shape(config) -> list:
    """The ``logits`` shape of the config's head."""
    if config.head == "masked-lm":
        return ["batch", "sequence", config.vocab_size]
    if config.head == "sequence-classification":
        return ["batch", config.num_labels]
    if config.head == "multiple-choice":
        return ["batch", "choices"]
    return ["batch", "sequence", config.num_labels]


# A checkpoint's architecture class names its head: what ``--head auto`` builds.
_HEAD_OF_ARCHITECTURE = {
    "ForMaskedLM": "masked-lm",
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForQuestionAnsweringSimple": "question-answering",  # XLM's and Flaubert's span head
    "ForMultipleChoice": "multiple-choice",
}
# Heads a family builds only where it says so: the task refuses them on a module without logits.
_OPT_IN_HEADS = ("question-answering", "multiple-choice")


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
        config = dataclasses.replace(
            config, **encoder_head(options, source.hf_config, source.defaults)
        )
        labels = getattr(config, "num_labels", None)
        if config.head == "question-answering" and labels != 2:
            raise ConfigError(
                f"--head question-answering needs num_labels 2 (start, end); got {labels!r}"
            )
        return config

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("feature_extraction")
        op, choices = builder.op, config.head == "multiple-choice"
        axes = ["batch", "choices", "sequence"] if choices else ["batch", "sequence"]
        input_ids = builder.input("input_ids", INT64, axes)
        attention_mask = builder.input("attention_mask", INT64, axes)
        token_type_ids = None
        if module.uses_token_type_ids:
            token_type_ids = builder.input("token_type_ids", INT64, axes)
        inputs = [input_ids, attention_mask, token_type_ids]
        # The family's own inputs (LayoutLM's bbox), after the contract's; by keyword.
        own = {}
        for name, (own_dtype, shape) in module.extra_inputs().items():
            if choices:  # [batch, choices, ...]
                shape = [d for s in shape for d in ((s, "choices") if s == "batch" else (s,))]
            own[name] = builder.input(name, own_dtype or dtype, shape)
        if token_type_ids is None and "token_type_ids" in own:  # the family's own token types
            inputs[2] = own.pop("token_type_ids")  # (TAPAS's [batch, sequence, 7]), in their slot
        if choices:  # each choice is a row of the encoder's batch: [batch*choices, ...]
            minus_one = op.Constant(value_ints=[-1])

            def rows(x):
                return op.Reshape(x, op.Concat(minus_one, op.Shape(x, start=2), axis=0))

            inputs = [None if x is None else rows(x) for x in inputs]
            own = {name: rows(x) for name, x in own.items()}

        outputs = module(op, *inputs, **own)
        if config.head in _OPT_IN_HEADS and "logits" not in outputs:
            raise ConfigError(f"--head {config.head} is not built for {config.model_type}")

        hidden = outputs["last_hidden_state"]
        hidden_axes = ["batch", "sequence", config.hidden_size]
        if choices:  # [batch*choices, sequence, hidden] -> [batch, choices, sequence, hidden]
            # (the states' own sequence: a pooling encoder's, Funnel's, is shorter than the input)
            per_choice = op.Concat(op.Shape(input_ids, end=2), op.Shape(hidden, start=1), axis=0)
            hidden, hidden_axes = (
                op.Reshape(hidden, per_choice),
                ["batch", "choices", *hidden_axes[1:]],
            )
            outputs["logits"] = op.Reshape(outputs["logits"], op.Shape(input_ids, end=2))
        set_output(builder, hidden, "last_hidden_state", dtype, hidden_axes)
        if config.head == "question-answering":  # [batch, sequence, 2]: the span's two ends
            ends = op.Split(outputs["logits"], num_outputs=2, axis=-1, _outputs=2)
            for name, logits in zip(("start_logits", "end_logits"), ends, strict=True):
                set_output(builder, op.Squeeze(logits, [-1]), name, dtype, ["batch", "sequence"])
        elif "logits" in outputs:
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
        model = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        if declared := module.extra_inputs():  # what a runner may feed as zeros when it has none
            zeros = [name for name in declared if name in module.zeros_when_absent]
            model.metadata_props[ZEROS_WHEN_ABSENT] = ",".join(zeros)
        return {"model": model}
