"""The text-classification task: a decoder's ``*ForSequenceClassification`` (reward models,
guard classifiers).

Inputs ``input_ids`` and ``attention_mask`` int64 [batch, sequence], pads where the
tokenizer puts them; outputs ``last_hidden_state`` [batch, sequence, hidden] and
``logits`` [batch, num_labels], the ``score`` of each row's last token that is not
``pad_token_id`` (see :mod:`mobius_text.models.decoder_classifiers`). No cache: the
graph runs the whole prompt once. It is the feature-extraction contract with the
``sequence-classification`` head, so ``mobius embed`` prints each text's label as it
does an encoder classifier's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mobius.errors import ConfigError
from mobius.tasks import FeatureExtractionTask


class TextClassificationTask(FeatureExtractionTask):
    """:class:`FeatureExtractionTask`'s graph with the one head its modules build."""

    name = "text-classification"

    def configure(self, config, options, source):
        """Refuse every head but the checkpoint's (``--head auto`` or ``sequence-classification``)."""
        if options.head not in ("auto", "sequence-classification"):
            raise ConfigError(
                f"--head {options.head}: {source.entry.key} builds sequence-classification "
                "(the token states alone: --model-type of the bare model, LlamaModel...)"
            )
        if options.pooling or options.normalize is not None:
            raise ConfigError(f"--pooling and --normalize do not apply to {source.entry.key}")
        return dataclasses.replace(config, head="sequence-classification")


def validate_text_classification(package_dir: Path, source: Path, record: dict, reference: bool):
    """``--validate``: ``logits`` and ``last_hidden_state`` on the sample batch (the second
    row right-padded with ``pad_token_id``) against transformers' class of the checkpoint."""
    import onnxruntime as ort

    from mobius.genai import source_json
    from mobius.validate import SAMPLE_LENGTHS, ValidationReport, load_reference, smoke_report
    from mobius_text.testing._classifier import compare_classifier, padded_rows

    session = ort.InferenceSession(
        str(package_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    lengths = list(SAMPLE_LENGTHS)
    checked = f"{len(lengths)} prompts of {', '.join(map(str, lengths))} random tokens"
    config = source_json(package_dir, "config.json")
    vocab, pad = config.get("vocab_size"), config.get("pad_token_id")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 5:
        raise ConfigError(f"--validate: {package_dir}/config.json has no usable vocab_size")
    if not reference:
        ids, mask = padded_rows(lengths, vocab, pad if isinstance(pad, int) else None)
        names = [o.name for o in session.get_outputs()]
        outputs = session.run(None, {"input_ids": ids, "attention_mask": mask})
        return smoke_report("text-classification", checked, dict(zip(names, outputs, strict=True)))
    torch_model = load_reference("AutoModelForSequenceClassification", source)
    report = ValidationReport(
        "text-classification", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = compare_classifier(torch_model, session, lengths)
    return report
