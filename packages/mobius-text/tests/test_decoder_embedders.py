"""Decoders as embedders and rerankers, equal to sentence-transformers on tiny random models.

Each case saves a tiny random decoder (every parameter perturbed) with a character-level
tokenizer, wraps it as sentence-transformers does (``SentenceTransformer`` with
``Pooling`` and ``Normalize``; ``CrossEncoder`` of a causal LM with ``LogitScore``;
a BERT ``CrossEncoder``), saves that directory, builds it with ``mobius build`` (the
head read from ``modules.json``) and compares what ``mobius embed`` / ``mobius
rerank`` print with ``SentenceTransformer.encode`` / ``CrossEncoder.predict``
(max abs diff <= 1e-4). Sentence embeddings are checked on both padding sides:
the graph finds the last real token from the mask.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from text_encoder_parity_cases import TINY, save_random_model

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli, tiny_tokenizer

TEXTS = ["w4 w5 w6 w7 w8", "w9", "w10 w11 w12", "w13 w14 w15 w16 w17 w18 w19"]
QUERY = "w20 w21 w22"
# The bare class sentence-transformers loads (AutoModel) for each family.
BARE = {
    "llama": "LlamaModel",
    "qwen2": "Qwen2Model",
    "qwen3": "Qwen3Model",
    "mistral": "MistralModel",
    "gemma2": "Gemma2Model",
    "glm": "GlmModel",
    # built through its causal LM (models/causal_backbones.py): learned positions, biases
    "gpt2": "GPT2Model",
}
CASES = [(family, pooling) for family in BARE for pooling in ("lasttoken", "mean")]
# The other decoders built as text encoders: one pooling each (the pooling is the graph's, shared).
CASES = [(f, p) for f, p in CASES if f not in ("gemma2", "glm", "gpt2") or p == "lasttoken"]
# Windows of 3 tokens (every layer; Gemma 2: every other) and Gemma 2's soft-capped scores.
OVERRIDES = {
    "mistral": {"sliding_window": 3},
    "gemma2": {"sliding_window": 3, "attn_logit_softcapping": 5.0},
}


def _tokenizer(directory, side: str = "left"):
    """Qwen2's tokenizer class over single characters (no merges), which AutoTokenizer loads
    alike for every family here (it forces Qwen2's class on qwen2 folders); "yes", "no" added."""
    from transformers import Qwen2Tokenizer

    chars = ["\u0120", *"abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    vocab.update(yes=len(vocab), no=len(vocab) + 1)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], padding_side=side)
    tokenizer.save_pretrained(directory)
    return tokenizer


def _sentence_transformer(tmp_path, family: str, pooling: str):
    """A SentenceTransformer over a tiny random bare decoder, saved; returns (model, dir)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    save_random_model(family, OVERRIDES.get(family, {}), BARE[family], tmp_path / "hf")
    _tokenizer(tmp_path / "hf")
    transformer = Transformer(str(tmp_path / "hf"))
    model = SentenceTransformer(
        modules=[transformer, Pooling(TINY["hidden_size"], pooling_mode=pooling), Normalize()],
        device="cpu",
    )
    model.save(str(tmp_path / "st"))
    return model, tmp_path / "st"


@pytest.mark.parametrize(("family", "pooling"), CASES, ids=[f"{f}-{p}" for f, p in CASES])
def test_decoder_embedder_matches_sentence_transformers(family, pooling, tmp_path, capsys):
    import onnxruntime as ort

    model, st_dir = _sentence_transformer(tmp_path, family, pooling)
    out = build_with_cli(st_dir, tmp_path / "onnx", "--validate")
    _assert_validated(out, "sentence-transformers")
    expected = model.encode(TEXTS, convert_to_numpy=True, batch_size=len(TEXTS))
    capsys.readouterr()
    assert main(["embed", str(out), *TEXTS]) == 0
    got = np.array([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert np.abs(got - expected).max() <= PARITY_ATOL
    if family == "gpt2":  # learned positions count pads too: sides differ in transformers too
        return
    # The other padding side gives the same embeddings.
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    batch = _tokenizer(tmp_path / "right", "right")(TEXTS, padding=True, return_tensors="np")
    assert (batch["attention_mask"][:, -1] == 0).any()
    feeds = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    names = [o.name for o in session.get_outputs()]
    right = dict(zip(names, session.run(None, feeds), strict=True))["sentence_embedding"]
    assert np.abs(right - expected).max() <= PARITY_ATOL


def _assert_validated(out, reference: str) -> dict:
    """``--validate`` passed against ``reference``, within the parity bound; its diffs."""
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] and validation["reference"].startswith(reference), validation
    assert max(validation["diffs"].values()) <= PARITY_ATOL
    return validation["diffs"]


def test_a_causal_lm_built_with_flags_embeds_as_its_bare_model(tmp_path):
    """No modules.json: --model-type, --head, --pooling and --normalize say it all."""
    save_random_model("qwen3", {}, "Qwen3ForCausalLM", tmp_path / "hf")
    _tokenizer(tmp_path / "hf")
    flags = ["--model-type", "Qwen3Model", "--head", "sentence-embedding"]
    flags += ["--pooling", "lasttoken", "--normalize", "--validate"]
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", *flags)
    diffs = _assert_validated(out, "transformers Qwen3Model")
    assert set(diffs) == {"last_hidden_state", "sentence_embedding"}


def test_a_causal_lm_with_sentence_transformers_modules_embeds(tmp_path, capsys):
    """Qwen3-Embedding's layout: a Qwen3ForCausalLM folder (its lm_head left out by name)
    with modules.json, last-token pooling and Normalize; --head auto reads them."""
    from sentence_transformers import SentenceTransformer

    save_random_model("qwen3", {"tie_word_embeddings": False}, "Qwen3ForCausalLM", tmp_path)
    _tokenizer(tmp_path)
    kinds = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize"}
    modules = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (kind, path) in enumerate(kinds.items())
    ]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    for path in ("1_Pooling", "2_Normalize"):
        (tmp_path / path).mkdir()
    pooling = {"word_embedding_dimension": TINY["hidden_size"], "pooling_mode_lasttoken": True}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    out = build_with_cli(tmp_path, tmp_path / "onnx")
    expected = SentenceTransformer(str(tmp_path), device="cpu").encode(
        TEXTS, convert_to_numpy=True, batch_size=len(TEXTS)
    )
    capsys.readouterr()
    assert main(["embed", str(out), *TEXTS]) == 0
    got = np.array([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert np.abs(got - expected).max() <= PARITY_ATOL


@pytest.fixture(scope="module")
def qwen3_reranker(tmp_path_factory):
    """A CrossEncoder of a tiny random Qwen3ForCausalLM (LogitScore over yes and no), saved."""
    from sentence_transformers import CrossEncoder

    path = tmp_path_factory.mktemp("qwen3-reranker")
    save_random_model("qwen3", {"tie_word_embeddings": False}, "Qwen3ForCausalLM", path / "hf")
    _tokenizer(path / "hf")
    model = CrossEncoder(str(path / "hf"), device="cpu")
    model.save(str(path / "ce"))
    return model, path


def _ranked(out, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["rerank", str(out), QUERY, *TEXTS]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _check_ranking(rows: list[dict], expected: np.ndarray) -> None:
    assert [r["index"] for r in rows] == list(np.argsort(-expected, kind="stable"))
    assert [r["document"] for r in rows] == [TEXTS[r["index"]] for r in rows]
    scores = np.array([r["score"] for r in sorted(rows, key=lambda r: r["index"])])
    assert np.abs(scores - expected).max() <= PARITY_ATOL


@pytest.mark.parametrize("source", ["cross-encoder", "score-tokens"])
def test_qwen3_yes_no_reranker_matches_cross_encoder(qwen3_reranker, source, tmp_path, capsys):
    """The CrossEncoder directory (LogitScore read), and the causal LM with --score-tokens."""
    model, path = qwen3_reranker
    if source == "cross-encoder":
        out = build_with_cli(path / "ce", tmp_path / "onnx", "--validate")
    else:
        options = ("--model-type", "Qwen3Model", "--score-tokens", "yes,no", "--validate")
        out = build_with_cli(path / "hf", tmp_path / "onnx", *options)
    assert set(_assert_validated(out, "transformers")) == {"last_hidden_state", "logits"}
    expected = model.predict([(QUERY, t) for t in TEXTS], batch_size=len(TEXTS))
    assert expected.min() > 0.05 and expected.max() < 0.95  # not saturated: the scores tell
    _check_ranking(_ranked(out, capsys), np.asarray(expected, np.float64))


def test_a_yes_no_reranker_built_through_its_causal_lm(tmp_path, capsys):
    """GPT-NeoX (no Llama-shaped backbone): --score-tokens keeps the head of its causal LM."""
    from sentence_transformers import CrossEncoder

    save_random_model("gpt_neox", {"tie_word_embeddings": False}, "GPTNeoXForCausalLM", tmp_path)
    _tokenizer(tmp_path)
    model = CrossEncoder(str(tmp_path), device="cpu")
    options = ("--model-type", "GPTNeoXModel", "--score-tokens", "yes,no", "--validate")
    out = build_with_cli(tmp_path, tmp_path / "onnx", *options)
    assert set(_assert_validated(out, "transformers")) == {"last_hidden_state", "logits"}
    expected = model.predict([(QUERY, t) for t in TEXTS], batch_size=len(TEXTS))
    assert expected.min() > 0.05 and expected.max() < 0.95  # not saturated: the scores tell
    _check_ranking(_ranked(out, capsys), np.asarray(expected, np.float64))


# A reranker's chat template as sentence-transformers reads one: the query and document roles.
# Short words: the longest pair stays under the 64 positions CrossEncoder truncates to.
CHAT_TEMPLATE = (
    "j{% for m in messages %}{% if m.role == 'query' %} q {{ m.content }}"
    "{% else %} d {{ m.content }}{% endif %}{% endfor %} a"
)


def test_a_chat_template_renders_the_pairs_as_cross_encoder_does(qwen3_reranker, tmp_path, capsys):
    import shutil

    from sentence_transformers import CrossEncoder

    _, path = qwen3_reranker
    shutil.copytree(path / "hf", tmp_path / "hf")
    (tmp_path / "hf" / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    model = CrossEncoder(str(tmp_path / "hf"), device="cpu")
    options = ("--model-type", "Qwen3Model", "--score-tokens", "yes,no")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", *options)
    expected = model.predict([(QUERY, t) for t in TEXTS], batch_size=len(TEXTS))
    plain = qwen3_reranker[0].predict([(QUERY, t) for t in TEXTS], batch_size=len(TEXTS))
    assert np.abs(expected - plain).max() > 1e-3  # the template changed the scores
    _check_ranking(_ranked(out, capsys), np.asarray(expected, np.float64))


def test_bert_cross_encoder_through_mobius_rerank(tmp_path, capsys):
    from sentence_transformers import CrossEncoder
    from tokenizers.processors import TemplateProcessing
    from transformers import BertConfig

    from mobius.testing import make_random_encoder

    config = BertConfig(
        vocab_size=TINY["vocab_size"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
        num_labels=1,
    )
    make_random_encoder(config, "sequence-classification").save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer(TINY["vocab_size"], {"[CLS]": 97, "[SEP]": 98})
    tokenizer.padding_side = "right"
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 97), ("[SEP]", 98)],
    )
    tokenizer.save_pretrained(tmp_path / "hf")
    # BERT's tokenizers give segment ids (the cross-encoder reads them): say so, as theirs do.
    config_path = tmp_path / "hf" / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    names = ["input_ids", "token_type_ids", "attention_mask"]
    config_path.write_text(json.dumps(dict(config, model_input_names=names)))
    model = CrossEncoder(str(tmp_path / "hf"), device="cpu")
    model.save(str(tmp_path / "ce"))
    out = build_with_cli(tmp_path / "ce", tmp_path / "onnx")
    expected = model.predict([(QUERY, t) for t in TEXTS], batch_size=len(TEXTS))
    _check_ranking(_ranked(out, capsys), np.asarray(expected, np.float64))


def test_rerank_refuses_an_embedder_and_a_query_alone(qwen3_reranker, tmp_path, capsys):
    _, st_dir = _sentence_transformer(tmp_path, "qwen3", "lasttoken")
    out = build_with_cli(st_dir, tmp_path / "onnx")
    assert main(["rerank", str(out), QUERY, *TEXTS]) == 1
    assert "no runner of 'mobius rerank' accepts" in capsys.readouterr().err
    options = ("--model-type", "Qwen3Model", "--score-tokens", "yes,no")
    reranker = build_with_cli(qwen3_reranker[1] / "hf", tmp_path / "rr", *options)
    assert main(["rerank", str(reranker), QUERY]) == 1
    assert "takes the query, then at least one document" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        (dict(score_tokens="yes"), "--score-tokens 'yes': expected two tokens"),
        (dict(score_tokens="yes,maybe"), "'maybe' is not a token of the tokenizer"),
        (dict(score_tokens="yes,no", head="none"), "--score-tokens builds a reranker: drop"),
        (dict(head="masked-lm"), "--head masked-lm: a decoder built as Qwen3Model takes"),
    ],
    ids=["one-token", "unknown-token", "with-a-head", "an-encoder-head"],
)
def test_bad_reranker_options_are_refused(qwen3_reranker, keywords, message):
    import mobius
    from mobius.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        mobius.build(
            qwen3_reranker[1] / "hf", load_weights=False, model_type="Qwen3Model", **keywords
        )
