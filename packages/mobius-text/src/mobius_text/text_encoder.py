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
from mobius.tasks import FeatureExtractionTask, ModelTask, encoder_head

#: The ``dest`` of ``--hidden-states`` among the build options' plugin values.
HIDDEN_STATES_OPTION = "hidden_states"
#: The ``dest`` of ``--score-tokens`` (a yes/no reranker's two tokens).
SCORE_TOKENS_OPTION = "score_tokens"
#: The heads a decoder takes: token states alone, or a sentence embedding.
DECODER_HEADS = ("none", "sentence-embedding")


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


def token_ids(value, tokenizer_dir: Path) -> tuple[int, ...]:
    """The ids of ``--score-tokens YES,NO`` in the vocabulary of the tokenizer in ``tokenizer_dir``."""
    tokens = value.split(",") if isinstance(value, str) else None
    if not tokens or len(tokens) != 2 or not all(tokens):
        raise ConfigError(f"--score-tokens {value!r}: expected two tokens, YES,NO (yes,no)")
    from mobius.generate import load_tokenizer

    vocab = load_tokenizer(tokenizer_dir).get_vocab()
    missing = [t for t in tokens if t not in vocab]
    if missing:
        raise ConfigError(
            f"--score-tokens: {missing[0]!r} is not a token of the tokenizer of {tokenizer_dir}"
        )
    return tuple(vocab[t] for t in tokens)


def score_token_ids(value, source) -> tuple[int, int] | None:
    """The ids of a yes/no reranker's two tokens: ``--score-tokens YES,NO`` (looked up in the
    source's tokenizer), else a sentence-transformers ``LogitScore`` module's, else None.

    Raises:
        ConfigError: not two tokens, a token the vocabulary lacks, an id out of range.
    """
    if value is None:
        ids = source.defaults.get(SCORE_TOKENS_OPTION)
        if ids is None:
            return None
    else:
        ids = token_ids(value, source.source_dir or source.path)
    vocab_size = source.hf_config.get_text_config().vocab_size
    if len(ids) != 2 or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in ids
    ):
        raise ConfigError(f"yes/no token ids {ids!r} of {source.path}: not two ids under the vocab")
    return ids


class TextEncoderTask(FeatureExtractionTask):
    """Feature extraction of a decoder backbone, with the ``hidden_states.{i}`` it is asked for.

    The graph is :class:`FeatureExtractionTask`'s; the module declares the extra
    outputs (``output_shapes``). Heads: ``none`` (token states), ``sentence-embedding``
    (``--pooling lasttoken`` or ``mean``..., ``--normalize``: a decoder embedder), or
    with ``--score-tokens`` a yes/no reranker's ``logits`` [batch, 1].
    """

    name = "text-encoder"

    def configure(self, config, options, source):
        """Apply the head (:meth:`decoder_head`) and ``--hidden-states`` (:func:`parse_hidden_states`).

        A subclass that makes its own graph (mobius-vision's ``image-text-encoder``)
        outputs token states only: it refuses the heads.
        """
        if type(self).build is FeatureExtractionTask.build:
            head = self.decoder_head(options, source)
        else:
            head = {}
            ModelTask.configure(self, config, options, source)
        value = options.plugin.get(HIDDEN_STATES_OPTION)
        selected = parse_hidden_states(value, config.num_hidden_layers)
        return dataclasses.replace(config, hidden_states=selected, **head)

    @staticmethod
    def decoder_head(options, source) -> dict:
        """``head``, ``pooling``, ``normalize`` (:func:`encoder_head`), or a yes/no reranker's
        ``score_token_ids`` (:func:`score_token_ids`) with one label."""
        if options.head not in ("auto", *DECODER_HEADS):
            raise ConfigError(
                f"--head {options.head}: a decoder built as {source.entry.key} takes --head "
                f"{' or '.join(DECODER_HEADS)} (a yes/no reranker: --score-tokens YES,NO)"
            )
        head = encoder_head(options, source.hf_config, source.defaults)
        ids = score_token_ids(options.plugin.get(SCORE_TOKENS_OPTION), source)
        if ids is not None:
            if options.head != "auto" or options.pooling or options.normalize is not None:
                raise ConfigError(
                    "--score-tokens builds a reranker: drop --head, --pooling and --normalize"
                )
            return dict(head, head="sequence-classification", num_labels=1, score_token_ids=ids)
        if head["head"] not in DECODER_HEADS:
            raise ConfigError(
                f"{source.path} is a {head['head']} checkpoint; {source.entry.key} builds "
                f"--head {' or '.join(DECODER_HEADS)}"
            )
        return head


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
    names = [o.name for o in session.get_outputs()]
    if "sentence_embedding" in names and (source / "modules.json").is_file():
        from mobius.validate import against_sentence_transformers

        return against_sentence_transformers(session, source)
    head = _built_head(names, source, record.get("options") or {})
    torch_model = load_reference(
        "AutoModelForCausalLM" if "logits" in names else "AutoModel", source
    )
    report = ValidationReport("text-encoder", f"transformers {type(torch_model).__name__}", checked)
    report.diffs = compare_text_encoder(torch_model, session, lengths, head=head)
    return report


def _built_head(names: list[str], source: Path, options: dict) -> dict:
    """How the package's head was built, from its record's options (and the source's LogitScore)."""
    head = dict(pooling=options.get("pooling") or "mean", normalize=bool(options.get("normalize")))
    if "logits" in names:
        from mobius_text.sentence_transformers import logit_score_tokens

        tokens = (options.get("plugin") or {}).get(SCORE_TOKENS_OPTION)
        ids = token_ids(tokens, source) if tokens else logit_score_tokens(source)
        head["score_token_ids"] = ids
    return head
