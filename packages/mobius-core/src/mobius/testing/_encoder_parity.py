"""Encoder parity: hidden states and heads of a padded batch, ONNX Runtime against PyTorch."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing._parity import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius.testing._parity_log import record_parity

# The transformers auto class of each head that has weights.
HEAD_CLASSES = {
    "none": "AutoModel",
    "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "sentence-embedding": "AutoModel",
    "question-answering": "AutoModelForQuestionAnswering",
    "multiple-choice": "AutoModelForMultipleChoice",
}
SEQUENCE_LEVEL = {"sequence-classification", "multiple-choice"}
# Per-token outputs of the span head, compared over the real tokens.
SPAN_OUTPUTS = ("start_logits", "end_logits")
# A multiple-choice batch: each row of the padded batch is one choice of a question.
CHOICES = 2
# Graph outputs that are one of transformers' ``hidden_states`` (by index), over the real tokens.
HIDDEN_STATE_OUTPUTS = {"penultimate_hidden_state": -2, "last_layer_hidden_state": -1}


def make_random_encoder(
    hf_config, head: str = "none", seed: int = 0, model_class: str | None = None
):
    """A float32 transformers encoder for ``head`` with every parameter perturbed, in eval mode.

    ``model_class`` names the transformers class to make instead of the head's auto
    class (``CLIPTextModelWithProjection``, or a class no auto class maps).
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    auto = getattr(transformers, model_class or HEAD_CLASSES[head])
    make = auto.from_config if hasattr(auto, "from_config") else auto._from_config  # a model class
    model = make(hf_config, dtype=torch.float32, attn_implementation="eager")
    perturb_parameters(model, seed)
    return model.eval()


def right_padded_batch(
    lengths: list[int],
    vocab_size: int,
    type_vocab_size: int,
    seed: int = 0,
    end_token_id: int | None = None,
    pad_token_id: int | None = None,
):
    """``input_ids``, ``attention_mask`` and ``token_type_ids`` [batch, max(lengths)], pads at the end.

    Ids avoid 0-3, where tokenizers keep pad and special tokens, so padding-aware
    position ids (RoBERTa's) see no pads among the real tokens. ``end_token_id``
    ends each row's real tokens (CLIP pools there); ``pad_token_id`` fills the
    padded positions (by default they hold random ids too).
    """
    rng = np.random.default_rng(seed)
    width = max(lengths)
    input_ids = rng.integers(4, vocab_size, (len(lengths), width)).astype(np.int64)
    mask = np.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        if end_token_id is not None:
            input_ids[row, length - 1] = end_token_id
        if pad_token_id is not None:
            input_ids[row, length:] = pad_token_id
    types = rng.integers(0, max(type_vocab_size, 1), input_ids.shape).astype(np.int64)
    return input_ids, mask, types


def random_boxes(limit: int):
    """Extra-input maker: valid boxes ``[batch, seq, 4]`` (x0 <= x1, y0 <= y1, all below ``limit``)."""

    def make(batch: int, seq: int, rng) -> np.ndarray:
        corners = rng.integers(0, limit, (batch, seq, 2, 2))  # two (x, y) points
        low, high = corners.min(axis=2), corners.max(axis=2)  # [batch, seq, 2] each
        return np.concatenate([low, high], axis=-1).astype(np.int64)  # x0, y0, x1, y1

    return make


def random_ids(*limits: int):
    """Extra-input maker: ids ``[batch, seq]`` below ``limits[0]``, or with several limits
    ``[batch, seq, len(limits)]``, column ``i`` below ``limits[i]`` (TAPAS's token types)."""

    def make(batch: int, seq: int, rng) -> np.ndarray:
        columns = [rng.integers(0, max(limit, 1), (batch, seq)) for limit in limits]
        ids = columns[0] if len(limits) == 1 else np.stack(columns, axis=-1)
        return ids.astype(np.int64)

    return make


def zero_extra_inputs(session) -> dict:
    """Extra-input makers of zeros for each graph input beyond the text contract's.

    Zeros are valid ids and boxes for every family, and the values transformers reads
    where it fills an absent input (``--validate`` feeds them to both models).
    """
    contract = ("input_ids", "attention_mask", "token_type_ids")

    def zeros(trailing, dtype):
        return lambda batch, seq, rng: np.zeros((batch, seq, *trailing), dtype)

    makers = {}
    for graph_input in session.get_inputs():
        trailing = [d for d in graph_input.shape if isinstance(d, int)]
        # int64 ids and boxes, or float ones (BROS's normalised boxes)
        dtype = np.float32 if graph_input.type == "tensor(float)" else np.int64
        if graph_input.name not in contract or trailing:  # TAPAS's token types: [b, s, 7]
            makers[graph_input.name] = zeros(trailing, dtype)
    return makers


@dataclass
class EncoderParity:
    """Max abs differences of one head's outputs over the real tokens."""

    head: str
    ep: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        worst = max(self.diffs.values())
        assert worst <= atol, f"--ep {self.ep} --head {self.head}: {self.diffs} > {atol:g}"


def pool_like_sentence_transformers(
    hidden: np.ndarray, mask: np.ndarray, mode: str, normalize: bool
) -> np.ndarray:
    """sentence-transformers' pooling, in numpy: the reference of the sentence-embedding head."""
    weights = mask[..., None].astype(hidden.dtype)
    if mode == "mean":
        pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
    elif mode == "cls":
        pooled = hidden[:, 0]
    elif mode == "lasttoken":  # the last real token, whichever side the pads are on
        last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)
        pooled = hidden[np.arange(len(hidden)), last]
    else:
        pooled = np.where(weights > 0, hidden, -1e9).max(1)
    if normalize:
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return pooled


def compare_encoder(
    torch_model,
    session,
    head: str,
    lengths,
    seed: int,
    pooling=("mean", True),
    special_tokens: dict | None = None,
    extra_inputs: dict | None = None,
):
    """Run one padded batch through both; the max abs difference of each output.

    Graph outputs beyond ``last_hidden_state``, ``logits`` and ``sentence_embedding``
    (CLIP's ``pooler_output``, ``text_embeds``) are compared whole with the PyTorch
    output field of the same name; ``penultimate_hidden_state`` with
    ``hidden_states[-2]`` and ``last_layer_hidden_state`` with ``hidden_states[-1]``, over
    the real tokens. ``special_tokens`` holds the ``end_token_id`` and
    ``pad_token_id`` of :func:`right_padded_batch`. A ``multiple-choice`` graph takes
    the rows as ``[len(lengths) // CHOICES, CHOICES, sequence]``; PyTorch's encoder sees
    them flattened, as the graph's does. ``extra_inputs`` maps a family's own input
    (LayoutLM's ``bbox``) to a maker ``(batch, seq, rng) -> array`` (:func:`random_boxes`,
    :func:`random_ids`); both models get the same values (PyTorch's by keyword).
    """
    import torch

    config = torch_model.config
    names = {i.name for i in session.get_inputs()}
    input_ids, mask, types = right_padded_batch(
        lengths,
        config.vocab_size,
        getattr(config, "type_vocab_size", 0) or 0,
        seed,
        **(special_tokens or {}),
    )
    feeds = {"input_ids": input_ids, "attention_mask": mask}
    if "token_type_ids" in names:
        feeds["token_type_ids"] = types
    rng = np.random.default_rng(seed + 1)
    for name, make in (extra_inputs or {}).items():  # a family's own inputs, valid values
        feeds[name] = make(*input_ids.shape, rng)
    choices = head == "multiple-choice"
    if choices:
        feeds = {k: v.reshape(-1, CHOICES, *v.shape[1:]) for k, v in feeds.items()}
    outputs = [o.name for o in session.get_outputs()]
    got = dict(zip(outputs, session.run(None, feeds), strict=True))
    if choices:
        got["last_hidden_state"] = got["last_hidden_state"].reshape(
            len(lengths), *mask.shape[1:], -1
        )

    torch_inputs = {k: torch.from_numpy(v) for k, v in feeds.items()}
    accepted = inspect.signature(torch_model.forward).parameters
    torch_inputs = {k: v for k, v in torch_inputs.items() if k in accepted}
    flat = {k: v.flatten(0, 1) if choices else v for k, v in torch_inputs.items()}
    with torch.no_grad():
        out = torch_model(**torch_inputs, output_hidden_states=True)
        base = torch_model.base_model(**flat)
    real = mask.astype(bool)
    reference = base.last_hidden_state.float().numpy()
    diffs = {"last_hidden_state": float(np.abs(got["last_hidden_state"] - reference)[real].max())}
    if "logits" in got:
        logits = out.logits.float().numpy()
        delta = np.abs(got["logits"] - logits)
        diffs["logits"] = float(delta.max() if head in SEQUENCE_LEVEL else delta[real].max())
    if "sentence_embedding" in got:
        expected = pool_like_sentence_transformers(reference, mask, *pooling)
        diffs["sentence_embedding"] = float(np.abs(got["sentence_embedding"] - expected).max())
    for name in SPAN_OUTPUTS:
        if name in got:
            expected = getattr(out, name).float().numpy()
            diffs[name] = float(np.abs(got[name] - expected)[real].max())
    for name, index in HIDDEN_STATE_OUTPUTS.items():
        if name in got:
            expected = out.hidden_states[index].float().numpy()
            diffs[name] = float(np.abs(got[name] - expected)[real].max())
    compared = {"last_hidden_state", "logits", "sentence_embedding", *HIDDEN_STATE_OUTPUTS}
    compared.update(SPAN_OUTPUTS)
    for name in got.keys() - compared:
        reference = getattr(out, name, None)
        assert reference is not None, f"graph output {name} has no PyTorch counterpart"
        diffs[name] = float(np.abs(got[name] - reference.float().numpy()).max())
    return diffs


def check_encoder_parity(
    hf_config,
    workdir: Path,
    *,
    heads: tuple[str, ...] = (
        "none",
        "masked-lm",
        "sequence-classification",
        "token-classification",
    ),
    lengths: tuple[int, ...] = (7, 4),
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    model_class: str | None = None,
    end_token_id: int | None = None,
    pad_token_id: int | None = None,
    extra_inputs: dict | None = None,
) -> list[EncoderParity]:
    """Build a perturbed tiny encoder per head with the CLI and check it against PyTorch.

    The batch has two rows of ``lengths`` tokens, the shorter padded at the end.
    ``sentence-embedding`` is checked against sentence-transformers' mean pooling,
    normalised, of PyTorch's hidden states. Returns the measurements per head and ep.
    ``model_class`` names the transformers class to compare with (see
    :func:`make_random_encoder`); ``end_token_id`` and ``pad_token_id`` place
    special tokens in the batch (see :func:`right_padded_batch`); ``extra_inputs`` makes a
    family's own inputs (see :func:`compare_encoder`).
    """
    import onnxruntime as ort

    workdir = Path(workdir)
    results = []
    for head in heads:
        torch_model = make_random_encoder(hf_config, head, seed, model_class)
        source = workdir / f"hf-{head}"
        torch_model.save_pretrained(source)
        for ep in eps:
            options = ["--ep", ep, "--head", head]
            if head == "sentence-embedding":
                options += ["--pooling", "mean", "--normalize"]
            out = build_with_cli(source, workdir / f"onnx-{head}-{ep}", *options)
            if ep == "default":
                onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
            session = ort.InferenceSession(
                str(out / "model.onnx"), providers=["CPUExecutionProvider"]
            )
            special = dict(end_token_id=end_token_id, pad_token_id=pad_token_id)
            diffs = compare_encoder(
                torch_model,
                session,
                head,
                lengths,
                seed,
                special_tokens=special,
                extra_inputs=extra_inputs,
            )
            result = EncoderParity(head, ep, diffs)
            result.assert_close(atol)
            results.append(result)
    return results
