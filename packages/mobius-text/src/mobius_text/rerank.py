"""``mobius rerank PACKAGE QUERY DOC...``: documents ranked by a built cross-encoder's score.

A reranker package gives ``logits`` [batch, 1] for each ``(query, document)`` pair:
a BERT-style sequence classifier with one label (``*ForSequenceClassification``,
a sentence-transformers ``CrossEncoder``), or a decoder built as a yes/no reranker
(``--score-tokens yes,no`` or a ``CrossEncoder`` directory with ``LogitScore``:
``logit(yes) - logit(no)`` at the last token). The score is what
``CrossEncoder.predict`` gives: the sigmoid of that logit (for a yes/no reranker,
the softmax probability of "yes" over "yes" and "no", as Qwen3-Reranker scores),
or the logit itself where ``config.json``'s ``sentence_transformers.activation_fn``
says ``Identity``.

The pair is tokenized as ``CrossEncoder`` does: where the package's tokenizer has a
chat template, it renders the messages ``{"role": "query"}`` and ``{"role":
"document"}`` (a reranker converted for sentence-transformers ships one that
writes its prompt: Qwen3-Reranker's system line, ``<Instruct>``, ``<Query>`` and
``<Document>``); else the tokenizer takes ``(query, document)`` as a text pair.
Anything else the model was trained with (an instruction for a bare causal LM's
prompt) is the user's to put in QUERY and DOC.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.chat_template import render_chat_template
from mobius.errors import MobiusError
from mobius.generate import read_graph

# Markers of a chat template that reads content as a list of typed parts (sentence-transformers'
# test of the message format: otherwise the content is the text itself).
_STRUCTURED_CONTENT = ("content[0]", ".type", "'type'", '"type"', "message.content[")

# CrossEncoder's activations, by the last part of their dotted path in config.json.
_ACTIVATIONS = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Identity": lambda x: x,
}


def is_reranker(package_dir: str | os.PathLike) -> bool:
    """Whether ``package_dir`` holds a graph that scores pairs: ``logits`` [batch, 1]."""
    graph = Path(package_dir) / "model.onnx"
    if not graph.is_file():
        return False

    model = read_graph(graph)
    for output in model.graph.output:
        dims = output.type.tensor_type.shape.dim
        if output.name == "logits" and len(dims) == 2 and dims[1].dim_value == 1:
            return True
    return False


def activation(config: dict):
    """``CrossEncoder``'s activation of one logit: ``config.json``'s, else the sigmoid."""
    path = (config.get("sentence_transformers") or {}).get("activation_fn")
    if path is None:
        return _ACTIVATIONS["Sigmoid"]
    name = str(path).rsplit(".", 1)[-1]
    if name not in _ACTIVATIONS:
        raise MobiusError(
            f"activation_fn {path!r} in config.json: mobius scores with Sigmoid or Identity"
        )
    return _ACTIVATIONS[name]


def rerank(
    package_dir: str | os.PathLike, query: str, documents: Sequence[str], threads: int | None = None
) -> list[dict]:
    """``{"index", "document", "score"}`` per document, best first (ties keep their order)."""
    from mobius.embedding import Embedder

    if not documents:
        raise MobiusError("no document to rank")
    embedder = Embedder(package_dir, threads=threads)
    if not is_reranker(package_dir):
        raise MobiusError(
            f"{package_dir} is not a reranker: its graph gives no logits [batch, 1] "
            "(build a cross-encoder, or a decoder with --score-tokens yes,no)"
        )
    logits = _chat_logits(embedder, query, documents)
    if logits is None:
        rows = embedder.classify([query] * len(documents), list(documents))
        logits = np.array([r["logits"][0] for r in rows], np.float64)
    scores = activation(embedder.config)(logits)
    order = sorted(range(len(documents)), key=lambda i: -scores[i])
    return [{"index": i, "document": documents[i], "score": float(scores[i])} for i in order]


def _chat_logits(embedder, query: str, documents: Sequence[str]) -> np.ndarray | None:
    """The pairs' logits through the tokenizer's chat template, or None when it has none."""
    tokenizer = embedder.tokenizer
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not template:
        return None
    structured = any(marker in template for marker in _STRUCTURED_CONTENT)

    def message(role: str, text: str) -> dict:
        return {"role": role, "content": [{"type": "text", "text": text}] if structured else text}

    texts = [
        render_chat_template(
            tokenizer,
            [message("query", query), message("document", d)],
            source=embedder.package_dir,
        )
        for d in documents
    ]
    try:  # the template writes the special tokens itself, as transformers' tokenize=True
        batch = tokenizer(texts, padding=True, truncation=True, add_special_tokens=False)
    except Exception as exc:  # a tokenizer refusal (a pad token missing)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise MobiusError(f"the tokenizer of {embedder.package_dir} fails: {reason}") from None
    feeds = {n: np.asarray(batch[n], np.int64) for n in embedder.inputs if n in batch}
    if set(feeds) != set(embedder.inputs):
        raise MobiusError(f"the chat template of {embedder.package_dir} gives no {embedder.inputs}")
    out = dict(zip(embedder.outputs, embedder.session.run(None, feeds), strict=True))
    return np.asarray(out["logits"], np.float64)[:, 0]


def run_cli(package_dir, inputs: list[str], options: dict) -> int:
    """``mobius rerank``: the first input is the query; prints one JSON line per document."""
    if len(inputs) < 2:
        raise MobiusError("mobius rerank takes the query, then at least one document")
    for row in rerank(package_dir, inputs[0], inputs[1:], options.get("threads")):
        print(json.dumps(row, ensure_ascii=False))
    return 0
