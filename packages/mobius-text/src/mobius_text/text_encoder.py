"""The text-encoder task: a decoder's token states for a diffusion pipeline's prompt.

The feature-extraction contract (``input_ids``, ``attention_mask`` int64
``[batch, sequence]`` → ``last_hidden_state``), plus one output
``hidden_states.{i}`` ``[batch, sequence, hidden]`` per index that
``--hidden-states`` selects: transformers' ``hidden_states[i]`` with
``output_hidden_states=True`` (0: the token embeddings; ``i``: the output of
layer ``i - 1``; ``num_hidden_layers``: the last state, final norm applied).
Negative indices count from the end as in Python, and the output is named by the
index they resolve to: on a 26-layer model ``--hidden-states -2`` (Lumina 2's
conditioning) writes ``hidden_states.25``. ``all`` writes every one (HiDream
stacks layers 1 to the last).

The model classes are :mod:`mobius_text.models.text_encoders`; the feeds are
what the tokenizer gives (pads where it puts them: the mask alone says which
tokens are real). Positions count from 0 on every row, as the bare transformers
model does, so states at the real tokens of a right-padded row equal an
unpadded run's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mobius.errors import ConfigError
from mobius.tasks import FeatureExtractionTask, ModelTask

#: The ``dest`` of ``--hidden-states`` among the build options' plugin values.
HIDDEN_STATES_OPTION = "hidden_states"


def parse_hidden_states(value, num_layers: int) -> tuple[int, ...]:
    """The sorted indices of transformers' ``hidden_states`` tuple that ``value`` selects.

    ``value``: None (none), ``"all"``, comma-separated integers (``"-2"``,
    ``"0,-1"``), or an int or a list of ints (the keyword form). Negative indices
    count from the end. A model of ``num_layers`` layers has ``num_layers + 1``
    states.

    Raises:
        ConfigError: a value that is not one of these, or an index out of range.
    """
    count = num_layers + 1
    if value is None:
        return ()
    if value == "all":
        return tuple(range(count))
    if isinstance(value, str):
        try:
            indices = [int(part) for part in value.split(",")]
        except ValueError:
            raise ConfigError(
                f"--hidden-states {value!r}: expected layer indices separated by commas "
                "(-2, or 0,-1) or all"
            ) from None
    elif isinstance(value, int) and not isinstance(value, bool):
        indices = [value]
    elif isinstance(value, (list, tuple)) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        indices = list(value)
    else:
        raise ConfigError(f"--hidden-states {value!r}: expected indices (-2, or 0,-1) or all")
    wrong = [i for i in indices if not -count <= i < count]
    if wrong:
        raise ConfigError(
            f"--hidden-states {wrong[0]}: a model of {num_layers} layers has hidden states "
            f"0 to {num_layers} (or {-count} to -1, counted from the end)"
        )
    return tuple(sorted({i % count for i in indices}))


class TextEncoderTask(FeatureExtractionTask):
    """Feature extraction of a decoder backbone, with the ``hidden_states.{i}`` it is asked for.

    The graph is :class:`FeatureExtractionTask`'s; the module declares the extra
    outputs (``output_shapes``). ``--head``, ``--pooling`` and ``--normalize`` are
    refused: the outputs are token states only.
    """

    name = "text-encoder"

    def configure(self, config, options, source):
        """Refuse the encoder heads; apply ``--hidden-states`` (:func:`parse_hidden_states`)."""
        config = ModelTask.configure(self, config, options, source)
        value = options.plugin.get(HIDDEN_STATES_OPTION)
        selected = parse_hidden_states(value, config.num_hidden_layers)
        return dataclasses.replace(config, hidden_states=selected)


def validate_text_encoder(package_dir: Path, source: Path, record: dict, reference: bool):
    """``--validate``: every output on the sample batch (the second row padded at the end),
    against transformers' bare model (``AutoModel``) at the real tokens."""
    import onnxruntime as ort

    from mobius.validate import SAMPLE_LENGTHS, ValidationReport, load_reference, smoke_report
    from mobius_text.testing._text_encoder import compare_text_encoder, padded_batch, run_session

    session = ort.InferenceSession(
        str(package_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    lengths = list(SAMPLE_LENGTHS)
    checked = f"{len(lengths)} prompts of {', '.join(map(str, lengths))} random tokens"
    if not reference:
        from mobius.genai import source_json

        config = source_json(package_dir, "config.json")
        vocab = config.get("vocab_size")
        if vocab is None and isinstance(config.get("text_config"), dict):
            vocab = config["text_config"].get("vocab_size")  # a VLM's (Qwen2.5-VL, Mistral 3)
        if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 5:
            raise ConfigError(f"--validate: {package_dir}/config.json has no usable vocab_size")
        ids, mask = padded_batch(lengths, vocab)
        return smoke_report("text-encoder", checked, run_session(session, ids, mask))
    torch_model = load_reference("AutoModel", source)
    report = ValidationReport("text-encoder", f"transformers {type(torch_model).__name__}", checked)
    report.diffs = compare_text_encoder(torch_model, session, lengths)
    return report
