"""The ``--validate`` validators of core's tasks: causal LM, seq2seq, feature extraction.

Each runs the built graphs on a fixed sample batch (two prompts of random token
ids, :data:`~mobius.validate.SAMPLE_LENGTHS`, the second padded) and, with torch,
the source loaded by transformers on the same batch (the parity kit's drivers of
:mod:`mobius.testing`); see :mod:`mobius.validate` for the contract.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.validate import (
    SAMPLE_DECODE_STEPS,
    SAMPLE_LENGTHS,
    ValidationReport,
    against_sentence_transformers,
    load_reference,
    smoke_report,
)


def _vocab_size(package_dir: Path) -> int:
    """The text vocabulary size of the package's config.json (a smoke run's id range)."""
    from mobius.genai import source_json

    config = source_json(package_dir, "config.json")
    size = config.get("vocab_size", config.get("text_config", {}).get("vocab_size"))
    if not isinstance(size, int) or isinstance(size, bool) or size < 2:
        raise MobiusError(f"--validate: {package_dir}/config.json has no usable vocab_size")
    return size


def _prompt_text(lengths) -> str:
    return f"{len(lengths)} prompts of {', '.join(map(str, lengths))} random tokens"


def validate_causal_lm(package_dir: Path, source: Path, record: dict, reference: bool):
    """Prefill the sample batch, then greedy decode steps through both caches."""
    from mobius.testing._parity import OnnxCausalLM, compare_causal_lm, left_padded_batch

    onnx_model = OnnxCausalLM(package_dir / "model.onnx")
    checked = f"{_prompt_text(SAMPLE_LENGTHS)} and {SAMPLE_DECODE_STEPS} greedy decode steps"
    if not reference:
        ids, mask, positions = left_padded_batch(list(SAMPLE_LENGTHS), _vocab_size(package_dir))
        logits, cache = onnx_model(ids, mask, positions, onnx_model.empty_cache(len(ids)))
        outputs = {"prefill logits": logits}
        for step in range(SAMPLE_DECODE_STEPS):
            ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
            positions, mask = positions[:, -1:] + 1, np.concatenate([mask, np.ones_like(ids)], 1)
            logits, cache = onnx_model(ids, mask, positions, cache)
            outputs[f"decode {step + 1} logits"] = logits
        return smoke_report("causal-lm", checked, outputs)
    torch_model = _causal_lm_reference(source)
    result = compare_causal_lm(torch_model, onnx_model, SAMPLE_LENGTHS, SAMPLE_DECODE_STEPS)
    wrapper = getattr(torch_model, "wrapper", None)  # a multimodal wrapper run on text
    name = type(torch_model).__name__ if wrapper is None else f"{type(wrapper).__name__} (text)"
    report = ValidationReport("causal-lm", f"transformers {name}", checked)
    report.diffs = {
        "prefill logits": result.prefill_diff,
        "decode logits": max(result.decode_diffs),
    }
    report.tokens_agree = result.onnx_tokens == result.torch_tokens
    return report


def _causal_lm_reference(source: Path):
    """The source's causal LM; a multimodal wrapper's (a ``--part text`` build, whose
    checkpoint ``AutoModelForCausalLM`` refuses) run on its text alone."""
    from mobius.genai import source_json

    if source.is_dir() and isinstance(source_json(source, "config.json").get("text_config"), dict):
        from mobius.testing._parity import text_forward

        try:
            wrapper = load_reference("AutoModelForCausalLM", source)
        except MobiusError:
            wrapper = load_reference("AutoModelForImageTextToText", source)
        return text_forward(wrapper)
    return load_reference("AutoModelForCausalLM", source)


def validate_seq2seq(package_dir: Path, source: Path, record: dict, reference: bool):
    """Encode the sample batch, prefill two decoder tokens, then greedy steps through both caches."""
    from mobius.testing._encoder_parity import right_padded_batch
    from mobius.testing._seq2seq_parity import OnnxSeq2Seq, compare_seq2seq

    onnx_model = OnnxSeq2Seq(package_dir)
    checked = (
        f"{_prompt_text(SAMPLE_LENGTHS)}, 2 decoder tokens and {SAMPLE_DECODE_STEPS} greedy steps"
    )
    if not reference:
        ids, mask, _ = right_padded_batch(list(SAMPLE_LENGTHS), _vocab_size(package_dir), 0)
        hidden, cross = onnx_model.encode(ids, mask)
        decoder_ids = np.ones((len(ids), 2), np.int64)
        logits, _ = onnx_model.decode(decoder_ids, mask, cross, onnx_model.empty_cache(len(ids)))
        return smoke_report("seq2seq", checked, {"encoder": hidden, "logits": logits})
    torch_model = load_reference("AutoModelForSeq2SeqLM", source)
    result = compare_seq2seq(
        torch_model, onnx_model, SAMPLE_LENGTHS, SAMPLE_DECODE_STEPS, seed=0, generate=False
    )
    report = ValidationReport("seq2seq", f"transformers {type(torch_model).__name__}", checked)
    report.diffs = {
        "encoder last_hidden_state": result.encoder_diff,
        "prefill logits": result.prefill_diff,
        "decode logits": max(result.decode_diffs),
    }
    report.tokens_agree = result.onnx_tokens == result.torch_tokens
    return report


def validate_feature_extraction(package_dir: Path, source: Path, record: dict, reference: bool):
    """Every output of the encoder on the sample batch (the second row padded at the end)."""
    import onnxruntime as ort

    from mobius.testing._encoder_parity import (
        compare_encoder,
        right_padded_batch,
        zero_extra_inputs,
    )

    session = ort.InferenceSession(
        str(package_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    checked = _prompt_text(SAMPLE_LENGTHS)
    head = _built_head(session, _vocab_size(package_dir))
    if not reference:
        ids, mask, types = right_padded_batch(list(SAMPLE_LENGTHS), _vocab_size(package_dir), 0)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        rng = np.random.default_rng(0)  # a family's own inputs (LayoutLM's bbox): zeros
        feeds.update({k: make(*ids.shape, rng) for k, make in zero_extra_inputs(session).items()})
        if head == "multiple-choice":  # the sample rows are the choices of one question
            feeds = {k: v[None] for k, v in feeds.items()}
        names = {i.name for i in session.get_inputs()}
        outputs = session.run(None, {k: v for k, v in feeds.items() if k in names})
        named = dict(zip([o.name for o in session.get_outputs()], outputs, strict=True))
        return smoke_report("feature-extraction", checked, named)
    if head == "sentence-embedding" and (source / "modules.json").is_file():
        return against_sentence_transformers(session, source)
    torch_model = load_reference(_reference_class(source, head), source)
    options = record.get("options") or {}
    # The build's own defaults where the options left them to it (no sentence-transformers modules).
    pooling = (options.get("pooling") or "mean", bool(options.get("normalize")))
    diffs = compare_encoder(
        torch_model,
        session,
        head,
        SAMPLE_LENGTHS,
        0,
        pooling,
        extra_inputs=zero_extra_inputs(session),
    )
    report = ValidationReport(
        "feature-extraction", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = diffs
    return report


#: The sample texts of a sentence-transformers source (its tokenizer makes the ids).
def _reference_class(source: Path, head: str) -> str:
    """The transformers class the checkpoint names (``architectures``) where it has the built
    head's outputs, else the head's auto class.

    A checkpoint's own class may add outputs its auto class lacks (CLIP's
    ``text_embeds``) or be the encoder alone (``T5EncoderModel``, where ``AutoModel``
    is the whole encoder-decoder).
    """
    import transformers
    from transformers import AutoConfig

    from mobius.testing._encoder_parity import HEAD_CLASSES

    config = AutoConfig.from_pretrained(str(source), trust_remote_code=False)
    named = [a for a in (getattr(config, "architectures", None) or []) if isinstance(a, str)]
    own = named[0] if named and hasattr(transformers, named[0]) else None
    if own is not None and (head == "none" or own.endswith(_HEAD_SUFFIXES.get(head, "\0"))):
        return own
    return HEAD_CLASSES[head]


# The class-name endings of each head (a bare encoder takes its checkpoint's class whatever it is).
_HEAD_SUFFIXES = {
    "masked-lm": "ForMaskedLM",
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": ("ForQuestionAnswering", "ForQuestionAnsweringSimple"),
    "multiple-choice": "ForMultipleChoice",
}


def _built_head(session, vocab_size: int) -> str:
    """The head the encoder graph was built with, from its outputs and their shapes."""
    outputs = {o.name: o for o in session.get_outputs()}
    if "sentence_embedding" in outputs:
        return "sentence-embedding"
    if "start_logits" in outputs:
        return "question-answering"
    if len(session.get_inputs()[0].shape) == 3:  # [batch, choices, sequence]
        return "multiple-choice"
    logits = outputs.get("logits")
    if logits is None:
        return "none"
    if len(logits.shape) == 2:
        return "sequence-classification"
    # [batch, sequence, vocab or labels]: a masked LM's last axis is the vocabulary
    return "masked-lm" if logits.shape[-1] == vocab_size else "token-classification"
