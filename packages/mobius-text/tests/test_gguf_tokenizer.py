"""Tokenizer files made from GGUF metadata, against transformers' own GGUF tokenizer.

The real SmolLM2 file (byte-level BPE, a chat template) and a synthetic
SentencePiece-style (``llama`` vocabulary) file written with ``gguf``: the files
mobius writes, loaded by ``AutoTokenizer`` and by ``tokenizers`` alone, must encode
and decode every test string as ``AutoTokenizer.from_pretrained(..., gguf_file=...)``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

import mobius
from mobius.weights import GGUFFile
from mobius_text.gguf._tokenizer import (
    BYTE,
    CONTROL,
    NORMAL,
    UNKNOWN,
    USER_DEFINED,
    UnsupportedTokenizerError,
    gguf_tokenizer_files,
)
from mobius_text.testing import smollm2_gguf, write_gguf

transformers = pytest.importorskip("transformers")  # the reference, a dev dependency

TEXTS = [
    "The capital of France is",
    "Hello, world! How are you?",
    "  leading spaces,   runs of   spaces\tand\t\ttabs  ",
    "line one\nline two\n\n\nthree newlines\r\nCRLF",
    "digits 0 7 42 123 4567 2024-12-02 3.14159 1,000,000",
    "def add(a, b):\n    return a + b  # sum\n",
    'x = {"key": [1, 2, 3]}; y = x["key"][0] ** 2',
    "héllo wörld, naïve café, Ελληνικά, русский, 日本語のテキスト, 한국어",
    "emoji 🤗🚀 and symbols ∑ ≠ → ©",
    "it's we'll they're I'M YOU'VE",
    "",
    " ",
    "\n",
]


def save_files(files: dict[str, str], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def assert_same_tokenizer(reference, directory: Path, texts: list[str]) -> None:
    """``directory``'s files, through AutoTokenizer and through tokenizers alone, tokenize
    ``texts`` as ``reference`` does, and decode the ids back alike."""
    mine = transformers.AutoTokenizer.from_pretrained(directory)
    raw = Tokenizer.from_file(str(directory / "tokenizer.json"))
    for text in texts:
        expected = reference(text)["input_ids"]
        assert mine(text)["input_ids"] == expected, text
        assert raw.encode(text).ids == expected, text
        for skip in (False, True):
            decoded = reference.decode(expected, skip_special_tokens=skip)
            assert mine.decode(expected, skip_special_tokens=skip) == decoded, text
            assert raw.decode(expected, skip_special_tokens=skip) == decoded, text


# -- SmolLM2: byte-level BPE ---------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """(reference tokenizer, folder of converted files)."""
    path = smollm2_gguf()
    with GGUFFile.open(path) as file:
        files = gguf_tokenizer_files(file.metadata)
    reference = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return reference, save_files(files, tmp_path_factory.mktemp("smollm2-tokenizer"))


def test_smollm2_tokenizer_matches_transformers(smollm2):
    reference, directory = smollm2
    specials = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"
    assert_same_tokenizer(reference, directory, [*TEXTS, specials])
    # Special tokens stay whole: one id each.
    ids = Tokenizer.from_file(str(directory / "tokenizer.json")).encode(specials).ids
    assert ids[0] == reference.convert_tokens_to_ids("<|im_start|>") and ids[-1] == 0


def test_smollm2_chat_template_and_special_tokens(smollm2):
    reference, directory = smollm2
    mine = transformers.AutoTokenizer.from_pretrained(directory)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy? 🇮🇹"},
    ]
    for add in (True, False):
        expected = reference.apply_chat_template(messages, add_generation_prompt=add)["input_ids"]
        assert (
            mine.apply_chat_template(messages, add_generation_prompt=add)["input_ids"] == expected
        )
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        assert getattr(mine, name) == getattr(reference, name)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["add_bos_token"] is False and config["model_max_length"] == 8192
    generation = json.loads((directory / "generation_config.json").read_text())
    # llama.cpp also ends generation at <reponame> (a FIM repo token) and <|endoftext|>.
    assert generation == {"bos_token_id": 1, "eos_token_id": [2, 4, 0], "pad_token_id": 2}


# -- a synthetic SentencePiece-style (``llama``) vocabulary ---------------------------

SPACE = "\u2581"
# (piece, score): scores out of id order, so that the merge ranks matter.
PIECES = [
    (SPACE, -1.0), ("e", -2.0), ("t", -2.5), ("a", -3.0), ("o", -3.0), ("h", -3.5),
    ("l", -3.6), ("r", -3.7), ("d", -3.8), ("n", -3.9), ("i", -4.0), ("s", -4.1),
    ("w", -4.2), ("c", -4.3), ("f", -4.4), ("p", -4.5), ("u", -4.6), ("1", -5.0),
    ("2", -5.0), ("3", -5.1), (",", -5.2), (".", -5.3), ("!", -5.4), ("é", -6.0),
    (SPACE + "t", -1.5), ("he", -1.6), (SPACE + "the", -1.2), ("ll", -1.7), ("llo", -1.9),
    (SPACE + "he", -2.2), (SPACE + "hello", -1.8), ("or", -2.0), ("ld", -2.1),
    (SPACE + "w", -2.3), (SPACE + "wor", -2.4), (SPACE + "world", -1.4), ("in", -2.6),
    (SPACE + "a", -2.7), ("an", -2.8), (SPACE + "and", -2.9), ("er", -3.2),
    (SPACE + SPACE, -3.3), ("12", -4.8), (SPACE + "1", -4.9), ("ca", -5.5), ("fé", -5.6),
    (SPACE + "ca", -5.7), (SPACE + "café", -5.8),
]  # fmt: skip
USER_TOKEN = "<tool>"


def sentencepiece_metadata(**overrides) -> dict:
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    types = [UNKNOWN, CONTROL, CONTROL, *[BYTE] * 256]
    scores = [0.0] * len(tokens)
    for piece, score in PIECES:
        tokens.append(piece)
        types.append(NORMAL)
        scores.append(score)
    tokens.append(USER_TOKEN)
    types.append(USER_DEFINED)
    scores.append(0.0)
    meta = {
        "llama.block_count": 1,
        "llama.embedding_length": 64,
        "llama.feed_forward_length": 96,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.rope.dimension_count": 16,
        "llama.context_length": 128,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.freq_base": 10000.0,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    meta.update(overrides)
    return meta


def tiny_llama_tensors(vocab: int) -> dict[str, np.ndarray]:
    """A one-layer llama's tensors (seeded random; only their names and shapes matter here)."""
    rng = np.random.default_rng(0)
    shapes = {
        "token_embd.weight": (vocab, 64),
        "output_norm.weight": (64,),
        "blk.0.attn_norm.weight": (64,),
        "blk.0.attn_q.weight": (64, 64),
        "blk.0.attn_k.weight": (32, 64),
        "blk.0.attn_v.weight": (32, 64),
        "blk.0.attn_output.weight": (64, 64),
        "blk.0.ffn_norm.weight": (64,),
        "blk.0.ffn_gate.weight": (96, 64),
        "blk.0.ffn_up.weight": (96, 64),
        "blk.0.ffn_down.weight": (64, 96),
    }
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def write_sentencepiece_gguf(path: Path, **overrides) -> Path:
    meta = sentencepiece_metadata(**overrides)
    return write_gguf(path, "llama", meta, tiny_llama_tensors(len(meta["tokenizer.ggml.tokens"])))


# transformers' GGUF loader puts SentencePiece's "▁" prefix only before text that does
# not start with a space, and never after an added token; SentencePiece, llama.cpp and
# Llama's own tokenizer.json put it in both places. The files follow the model's own
# tokenizer, so transformers is the reference only for texts where the two agree:
# no leading whitespace, no added tokens. The others are checked piece by piece below.
SENTENCEPIECE_TEXTS = [
    *(text for text in TEXTS if not text[:1].isspace()),
    "hello world",
    "hello  world ",
    "the hello, the world! and café",
    "Hello World",  # capitals are not in the vocabulary: byte fallback
    "1 12 123 321",
    "the\u2581the",
]


@pytest.mark.parametrize("add_bos", [None, False])
def test_sentencepiece_tokenizer_matches_transformers(tmp_path, add_bos):
    overrides = {} if add_bos is None else {"tokenizer.ggml.add_bos_token": add_bos}
    path = write_sentencepiece_gguf(tmp_path / "sp.gguf", **overrides)
    with GGUFFile.open(path) as file:
        files = gguf_tokenizer_files(file.metadata)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    directory = save_files(files, tmp_path / "converted")
    assert_same_tokenizer(reference, directory, SENTENCEPIECE_TEXTS)
    # llama.cpp adds BOS to a SentencePiece vocabulary unless the file says not to.
    ids = Tokenizer.from_file(str(directory / "tokenizer.json")).encode("hello").ids
    assert (ids[0] == 1) is (add_bos is None)
    assert json.loads(files["tokenizer_config.json"])["add_bos_token"] is (add_bos is None)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        (" ", [SPACE + SPACE]),
        (" hello  world ", [SPACE, SPACE + "hello", SPACE, SPACE + "world", SPACE]),
        ("  the", [SPACE + SPACE, SPACE + "the"]),
        ("<s>hello</s> the", ["<s>", SPACE + "hello", "</s>", SPACE, SPACE + "the"]),
        ("a<tool>b", [SPACE + "a", USER_TOKEN, SPACE, "<0x62>"]),
    ],
)
def test_sentencepiece_dummy_prefix_as_llama_cpp(text, pieces):
    """ "▁" goes before the text even when it starts with a space, and after each added
    token (llama.cpp's ``add_space_prefix``); decoding gives the text back."""
    meta = sentencepiece_metadata(**{"tokenizer.ggml.add_bos_token": False})
    tokenizer = Tokenizer.from_str(gguf_tokenizer_files(meta)["tokenizer.json"])
    encoding = tokenizer.encode(text)
    assert encoding.tokens == pieces
    if "<" not in text:
        assert tokenizer.decode(encoding.ids) == text


def test_gemma_vocabulary_matches_transformers(tmp_path):
    """Gemma's files: no dummy prefix, a whitespace-run token stored with real spaces, and
    merges ranked by position, not score. With no prefix, every text compares."""
    meta = sentencepiece_metadata(**{"tokenizer.ggml.add_space_prefix": False})
    meta = {key.replace("llama.", "gemma2."): value for key, value in meta.items()}
    meta |= {"gemma2.attention.key_length": 16, "gemma2.attention.value_length": 16}
    tokens = list(meta["tokenizer.ggml.tokens"])
    tokens[tokens.index(SPACE + SPACE)] = "  "
    meta["tokenizer.ggml.tokens"] = tokens
    path = write_gguf(tmp_path / "g.gguf", "gemma2", meta, tiny_llama_tensors(len(tokens)))
    with GGUFFile.open(path) as file:
        files = gguf_tokenizer_files(file.metadata)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    texts = [*TEXTS, *SENTENCEPIECE_TEXTS, " hello  world ", "<s>hello</s> the", "a<tool>b"]
    assert_same_tokenizer(reference, save_files(files, tmp_path / "converted"), texts)


def test_sentencepiece_without_space_prefix(tmp_path):
    """``add_space_prefix = false`` (Gemma's files): no "▁" before the first word."""
    meta = sentencepiece_metadata(**{"tokenizer.ggml.add_space_prefix": False})
    tokenizer = Tokenizer.from_str(gguf_tokenizer_files(meta)["tokenizer.json"])
    vocab = tokenizer.get_vocab()
    assert tokenizer.encode("hello world").ids[1:] == [
        vocab["he"],
        vocab["llo"],
        vocab[SPACE + "world"],
    ]
    assert tokenizer.decode(tokenizer.encode(" hello world").ids) == " hello world"


def test_build_writes_tokenizer_files(tmp_path):
    """``mobius.build`` of a GGUF file carries the converted files into the package."""
    path = write_sentencepiece_gguf(tmp_path / "sp.gguf")
    out = mobius.build(path, load_weights=False).save(tmp_path / "out", progress=False)
    converted = transformers.AutoTokenizer.from_pretrained(out)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    assert converted("the hello world")["input_ids"] == reference("the hello world")["input_ids"]
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= {
        p.name for p in out.iterdir()
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tokenizer.ggml.model": "rwkv"}, "tokenizer model 'rwkv' is not supported"),
        (
            {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "mystery"},
            "pre-tokenizer 'mystery' is not supported",
        ),
    ],
)
def test_unsupported_vocabulary_is_a_clear_error_and_a_build_warning(tmp_path, overrides, message):
    meta = sentencepiece_metadata(**overrides)
    with pytest.raises(UnsupportedTokenizerError, match=message):
        gguf_tokenizer_files(meta)
    path = write_gguf(
        tmp_path / "x.gguf", "llama", meta, tiny_llama_tensors(len(meta["tokenizer.ggml.tokens"]))
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        package = mobius.build(path, load_weights=False)
    assert any(message in str(w.message) for w in caught)
    assert "tokenizer.json" not in package.text_files
