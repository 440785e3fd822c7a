"""Embed texts (or classify them) with a built feature-extraction package in ONNX Runtime.

A feature-extraction package (:mod:`mobius.tasks._feature_extraction`) takes
``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the model has them)
and gives ``last_hidden_state``, plus what its head was built with:

- ``sentence_embedding`` (``--head sentence-embedding``, a sentence-transformers
  source's default): pooled and normalised as the build chose; returned as it is;
- ``logits`` [batch, labels] (a sequence classifier or reranker): a label per text,
  from ``config.json``'s ``id2label``; a reranker (one logit) scores each text
  against a query, the pair tokenized as ``(query, text)`` as cross-encoders are trained;
- ``start_logits`` and ``end_logits`` (``--head question-answering``): each text is a
  context, the query the question; the answer is the context's span of at most
  :data:`MAX_ANSWER_TOKENS` tokens whose start and end logits sum highest;
- neither: the mean of ``last_hidden_state`` over the real tokens.

A family's own inputs beyond the text (LayoutLM's ``bbox``) are fed as zeros where
the graph's ``mobius.zeros_when_absent`` metadata names them (transformers does the
same without them); a package with others is refused.

Example::

    import mobius

    vectors = mobius.embed("minilm-out/", ["The capital of France is Paris.", "Hi"])

Needs ONNX Runtime: ``pip install mobius-core[run]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import PackageError, _read_json
from mobius.tasks._feature_extraction import ZEROS_WHEN_ABSENT

_TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: The longest answer span ``Embedder.answer`` considers, in tokens (transformers' default).
MAX_ANSWER_TOKENS = 15


class Embedder:
    """A feature-extraction package loaded in ONNX Runtime, with its own tokenizer."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        graph = self.package_dir / "model.onnx"
        if not graph.is_file():
            raise PackageError(
                f"no model.onnx in {self.package_dir}: not a package built by mobius"
            )
        from mobius.classification import open_session

        self.session = open_session(graph, threads)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        #: a family's own inputs (LayoutLM's bbox) the text has none of: fed as zeros, their shape
        self.zero_inputs = self._zero_inputs()
        if not {"input_ids", "attention_mask"} <= set(self.inputs) or set(self.inputs) - set(
            _TOKEN_INPUTS
        ) - set(self.zero_inputs):
            raise PackageError(
                f"{self.package_dir} is not a feature-extraction package: its graph takes "
                f"{self.inputs}, not input_ids and attention_mask (and token_type_ids)"
            )
        if len(self.session.get_inputs()[0].shape) != 2:  # [batch, choices, sequence]
            raise PackageError(
                f"{self.package_dir} is a multiple-choice package (inputs [batch, choices, "
                "sequence]): run it in ONNX Runtime with the choices of each question"
            )
        self.config = _read_json(self.package_dir / "config.json")
        self._tokenizer = None

    def _zero_inputs(self) -> dict[str, list]:
        """The graph's extra inputs transformers fills with zeros when absent, with their shapes.

        The build names them in the graph's metadata; an extra input it does not name
        changes the model's result when absent in another way, and is refused here.
        """
        meta = self.session.get_modelmeta().custom_metadata_map
        if ZEROS_WHEN_ABSENT not in meta:
            return {}
        zeros = set(filter(None, meta[ZEROS_WHEN_ABSENT].split(",")))
        declared = {i.name: i.shape for i in self.session.get_inputs()}
        refused = set(declared) - set(_TOKEN_INPUTS) - zeros
        if refused:
            raise PackageError(
                f"{self.package_dir} takes {sorted(refused)} beside the text, and its model "
                "reads their absence otherwise than as zeros: run it in ONNX Runtime with them"
            )
        return {name: declared[name] for name in sorted(zeros)}

    @property
    def tokenizer(self):
        """The package's tokenizer (``transformers.AutoTokenizer``), loaded on first use."""
        if self._tokenizer is None:
            from mobius.generate import load_tokenizer

            self._tokenizer = load_tokenizer(self.package_dir)
        return self._tokenizer

    def _run(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, spans: bool = False
    ) -> dict:
        """The outputs and feeds by name; ``spans``: also each pair's token ``offset_mapping``
        and ``sequence_ids`` (which text each token comes from)."""
        if not texts:
            raise MobiusError("no text to embed")
        try:
            batch = self.tokenizer(
                list(texts),
                list(pairs) if pairs else None,
                padding=True,
                truncation="only_second" if spans else True,
                # a pair's second segment: even a tokenizer that leaves them out by default
                return_token_type_ids="token_type_ids" in self.inputs,
                return_offsets_mapping=spans,
            )
        except ValueError as exc:  # a tokenizer without a padding token, texts it refuses
            raise PackageError(
                f"the tokenizer of {self.package_dir} refuses the texts: {exc}"
            ) from None
        feeds = {name: np.asarray(batch[name], np.int64) for name in self.inputs if name in batch}
        if "token_type_ids" in self.inputs and "token_type_ids" not in feeds:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        rows, width = feeds["input_ids"].shape
        for name, shape in self.zero_inputs.items():  # as transformers does without them
            dims = [rows if d == "batch" else width if d == "sequence" else d for d in shape]
            feeds[name] = np.zeros(dims, np.int64)
        out = {**dict(zip(self.outputs, self.session.run(None, feeds), strict=True)), **feeds}
        if spans:
            out["offset_mapping"] = batch["offset_mapping"]
            out["sequence_ids"] = [batch.sequence_ids(i) for i in range(len(texts))]
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``[len(texts), hidden]`` float32: ``sentence_embedding`` as built, else the mean
        of ``last_hidden_state`` over each text's real tokens."""
        out = self._run(texts)
        if "sentence_embedding" in out:
            return np.asarray(out["sentence_embedding"], np.float32)
        if "last_hidden_state" not in out:
            raise PackageError(f"{self.package_dir} has no embedding output: {self.outputs}")
        mask = out["attention_mask"][..., None].astype(np.float32)
        summed = (out["last_hidden_state"] * mask).sum(axis=1)
        return (summed / np.maximum(mask.sum(axis=1), 1.0)).astype(np.float32)

    def classify(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[dict]:
        """A ``{"label", "score", "logits"}`` per text (a reranker scores ``(text, pair)``)."""
        out = self._run(texts, pairs)
        logits = out.get("logits")
        if logits is None or np.ndim(logits) != 2:
            raise PackageError(f"{self.package_dir} is not a sequence classifier: {self.outputs}")
        labels = self.config.get("id2label") or {}
        results = []
        for row in np.asarray(logits, np.float32):
            best = int(row.argmax())
            probs = np.exp(row - row.max())
            probs /= probs.sum()
            label = labels.get(str(best), str(best)) if len(row) > 1 else "score"
            score = float(probs[best]) if len(row) > 1 else float(row[0])
            results.append({"label": str(label), "score": score, "logits": row.tolist()})
        return results

    def answer(self, question: str, contexts: Sequence[str]) -> list[dict]:
        """The best answer to ``question`` in each context: ``{"answer", "score", "start",
        "end"}``, the span's characters in the context and its start plus end logit."""
        out = self._run([question] * len(contexts), contexts, spans=True)
        results = []
        for row, context in enumerate(contexts):
            starts, ends = out["start_logits"][row], out["end_logits"][row]
            tokens = [i for i, seq in enumerate(out["sequence_ids"][row]) if seq == 1]
            if not tokens:
                raise MobiusError(f"the question leaves no token of the context {context!r}")
            score, first, last = max(
                (float(starts[i] + ends[j]), i, j)
                for i in tokens
                for j in tokens
                if i <= j < i + MAX_ANSWER_TOKENS
            )
            begin, end = out["offset_mapping"][row][first][0], out["offset_mapping"][row][last][1]
            results.append(dict(answer=context[begin:end], score=score, start=begin, end=end))
        return results

    @property
    def answers_questions(self) -> bool:
        """Whether the package's head is question answering (``start_logits``, ``end_logits``)."""
        return "start_logits" in self.outputs

    @property
    def is_classifier(self) -> bool:
        """Whether the package's head is a sequence classifier (``logits`` [batch, labels])."""
        shape = next((o.shape for o in self.session.get_outputs() if o.name == "logits"), None)
        return shape is not None and len(shape) == 2


def embed(package_dir: str | os.PathLike, texts: str | Sequence[str], **options) -> np.ndarray:
    """Embeddings ``[n, hidden]`` of ``texts`` (one text gives ``[1, hidden]``); see :class:`Embedder`."""
    return Embedder(package_dir, **options).embed([texts] if isinstance(texts, str) else texts)


def run_cli(
    package_dir, texts: list[str], output: str | None, threads=None, query: str | None = None
) -> int:
    """``mobius embed``: embeddings (or labels) as JSON lines on stdout, or to ``.npy``/``.json``.

    ``query``: a classifier (a reranker) scores each ``(query, text)`` pair.
    """
    try:
        return _run_cli(package_dir, texts, output, threads, query)
    except OSError as exc:  # an unwritable --output
        raise MobiusError(f"cannot write {output}: {exc.strerror or exc}") from None


def _write_rows(rows: list[dict], texts: list[str], field: str, output: str | None) -> None:
    """``rows`` (one per text) to ``output`` as JSON, or printed a line per text with its
    ``field`` (``label``, ``answer``) and ``score``."""
    if output:
        Path(output).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {output}")
        return
    for text, row in zip(texts, rows, strict=True):
        print(json.dumps({"text": text, field: row[field], "score": row["score"]}))


def _run_cli(package_dir, texts: list[str], output: str | None, threads, query) -> int:
    embedder = Embedder(package_dir, threads=threads)
    if embedder.answers_questions:  # the texts are contexts, the query the question
        if query is None:
            raise MobiusError(f"{package_dir} answers questions: give the question with --query")
        _write_rows(embedder.answer(query, texts), texts, "answer", output)
        return 0
    if query is not None and not embedder.is_classifier:
        raise MobiusError(
            f"--query pairs texts for a reranker or classifier; {package_dir} embeds texts"
        )
    if embedder.is_classifier:
        if query is None:
            rows = embedder.classify(texts)
        else:  # (query, text) pairs, in the order cross-encoders read them
            rows = embedder.classify([query] * len(texts), texts)
        _write_rows(rows, texts, "label", output)
        return 0
    vectors = embedder.embed(texts)
    if output and output.endswith(".npy"):
        np.save(output, vectors)
        print(f"wrote {output} {list(vectors.shape)}")
    elif output:
        Path(output).write_text(json.dumps(vectors.tolist()) + "\n", encoding="utf-8")
        print(f"wrote {output} {list(vectors.shape)}")
    else:
        for vector in vectors:
            print(json.dumps([round(float(v), 7) for v in vector]))
    return 0
