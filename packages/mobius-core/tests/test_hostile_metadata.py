"""Hostile metadata: GGUF values of the wrong type or range, safetensors headers laxer than
the format, and packages with a corrupt graph or tokenizer given to ``mobius generate``.

Each is refused with one line naming the file (and the key), exit 1: never an internal
error (exit 3), never a silent guess. The safetensors rules are the format's, as the
reference loader (``safetensors.safe_open``) enforces them; the cases here are refused by
both.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from mobius.cli import main
from mobius.errors import CheckpointError
from mobius.weights import GGUFMetadata, SafetensorsCheckpoint

# -- GGUF: typed metadata reads ------------------------------------------------------------


@pytest.fixture
def metadata() -> GGUFMetadata:
    values = {
        "heads": 4,
        "zero": 0,
        "text": "4",
        "flag": True,
        "eps": 1e-5,
        "nan": float("nan"),
        "words": ["a", "b"],
        "ids": [1, 2, 3],
        "mixed": ["a", 1],
    }
    return GGUFMetadata(values, "/models/x.gguf")


def test_typed_reads_return_values_and_defaults(metadata):
    assert metadata.get_int("heads", min=1) == 4
    assert metadata.get_int("absent", 7) == 7
    assert metadata.get_float("eps", positive=True) == pytest.approx(1e-5)
    assert metadata.get_float("heads") == 4.0  # an integer is a number
    assert metadata.get_bool("flag") is True
    assert metadata.get_str("text") == "4"
    assert metadata.get_str_list("words", length=2) == ["a", "b"]
    assert metadata.get_int_list("ids", min=1, max=3) == [1, 2, 3]
    assert metadata.get_float_list("absent") is None
    assert metadata["heads"] == 4 and len(metadata) == 9  # still a plain mapping


@pytest.mark.parametrize(
    ("read", "message"),
    [
        (lambda m: m.get_int("zero", min=1), "zero = 0 is not an integer from 1"),
        (lambda m: m.get_int("text"), "text = '4' is not an integer"),
        (lambda m: m.get_int("flag"), "flag = True is not an integer"),
        (lambda m: m.get_float("nan"), "nan = nan is not a finite number"),
        (lambda m: m.get_float("zero", positive=True), "zero = 0 is not a positive number"),
        (lambda m: m.get_bool("zero"), "zero = 0 is not a bool"),
        (lambda m: m.get_str("heads"), "heads = 4 is not a string"),
        (lambda m: m.get_str_list("text"), "text = '4' is not a list"),
        (lambda m: m.get_str_list("mixed"), r"mixed\[1\] = 1 is not a string"),
        (lambda m: m.get_str_list("ids"), r"ids\[0\] = 1 is not a string"),
        (lambda m: m.get_int_list("ids", max=2), r"ids\[2\] = 3 is not an integer from 0 to 2"),
        (lambda m: m.get_int_list("ids", length=4), "ids has 3 entries, expected 4"),
        (lambda m: m.get_float_list("words"), r"words\[0\] = 'a' is not a finite number"),
    ],
)
def test_wrong_type_or_range_names_the_file_and_key(metadata, read, message):
    with pytest.raises(CheckpointError, match=message) as caught:
        read(metadata)
    assert str(caught.value).startswith("/models/x.gguf: metadata ")
    assert "\n" not in str(caught.value)


def test_a_long_value_is_cut_short_in_the_message():
    metadata = GGUFMetadata({"tokens": list(range(100_000))}, "x.gguf")
    with pytest.raises(CheckpointError) as caught:
        metadata.get_str("tokens")
    assert len(str(caught.value)) < 150


# -- safetensors: as strict as the format ---------------------------------------------------


def write_safetensors(path: Path, header: str, data: bytes) -> Path:
    """A safetensors file with ``header`` (JSON text, written as is) and ``data``."""
    raw = header.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


A = '"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
B = '"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}'


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        # The second copy of a name used to win; now neither does.
        (f'{{{A}, "a": {{"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}}}', 8, "'a' twice"),
        (
            '{"a": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}}',
            4,
            "'dtype' twice",
        ),
        (
            f'{{{A}, "b": {{"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}}}',
            12,
            "bytes 4 to 8",
        ),
        ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', 8, "bytes 0 to 4"),
        (f"{{{A}}}", 8, "has 8 bytes but its tensors cover 4"),
        ("{}", 4, "has 4 bytes but its tensors cover 0"),
        # An empty tensor, too, sits where the data before it ends (the old check let it be).
        (
            f'{{{A}, {B}, "z": {{"dtype": "F32", "shape": [0], "data_offsets": [6, 6]}}}}',
            8,
            "'z' overl",
        ),
        (f'{{"__metadata__": {{"format": 1}}, {A}}}', 4, "__metadata__ entry 'format' is int"),
        (f'{{"__metadata__": {{"a": ["pt"]}}, {A}}}', 4, "entry 'a' is list, not a string"),
        (f'{{"__metadata__": ["pt"], {A}}}', 4, "__metadata__ is not an object"),
        ('{"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}', 4, "unknown dtype"),
        ('{"a": {"dtype": {"F32": 1}, "shape": [1], "data_offsets": [0, 4]}}', 4, "unknown dtype"),
    ],
    ids=[
        "duplicate-name",
        "duplicate-field",
        "hole",
        "gap-before-first",
        "trailing-bytes",
        "data-without-tensors",
        "empty-tensor-inside-another",
        "metadata-int",
        "metadata-list-value",
        "metadata-not-object",
        "dtype-list",
        "dtype-object",
    ],
)
def test_safetensors_laxer_than_the_format_is_refused(tmp_path, header, data, message):
    path = write_safetensors(tmp_path / "model.safetensors", header, bytes(data))
    with pytest.raises(CheckpointError, match=message) as caught:
        SafetensorsCheckpoint.open(path)
    assert str(caught.value).startswith(str(path))
    from safetensors import SafetensorError, safe_open

    with pytest.raises(SafetensorError), safe_open(path, "np"):  # the reference refuses it too
        pass


def test_safetensors_the_format_allows_still_opens(tmp_path):
    """Empty tensors between others, null metadata, extra entry fields, header padding."""
    z = '"z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}'
    c = '"c": {"dtype": "U8", "shape": [0], "data_offsets": [8, 8], "x": 1}'
    header = f'{{"__metadata__": null, {A}, {z}, {B}, {c}}}   '
    path = write_safetensors(tmp_path / "model.safetensors", header, bytes(8))
    with SafetensorsCheckpoint.open(path) as checkpoint:
        assert sorted(checkpoint) == ["a", "b", "c", "z"]
        assert checkpoint["z"].numpy().shape == (0,)


def test_build_with_a_dtype_list_is_a_user_error(tmp_path, tiny_llama_dir, capsys):
    """Through ``mobius build``: exit 1 and one line (it was exit 3, an internal error)."""
    path = tiny_llama_dir / "model.safetensors"
    size = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8 : 8 + size])
    name = next(k for k in header if k != "__metadata__")
    header[name]["dtype"] = [header[name]["dtype"]]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + path.read_bytes()[8 + size :])
    assert main(["build", "--model", str(tiny_llama_dir), str(tmp_path / "out"), "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown dtype" in err[0] and "model.safetensors" in err[0]
    assert not (tmp_path / "out").exists()


# -- mobius generate: a corrupt graph or tokenizer --------------------------------------------


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """The tiny Llama built without tokenizer files (they are written per case)."""
    import mobius
    from mobius_text.testing import write_tiny_llama

    root = tmp_path_factory.mktemp("hostile-package")
    source = write_tiny_llama(root / "hf")
    return mobius.build(source).save(root / "package", progress=False)


def _generate(capsys, package: Path) -> str:
    """``mobius generate`` on ``package``: exit 1 and one line on stderr, which it returns."""
    code = main(["generate", str(package), "hello", "--max-new-tokens", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1, err
    assert len(err) == 1 and err[0].startswith("mobius: error: "), err
    return err[0]


def _copy(package: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(package, tmp_path / "package"))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_generate_refuses_a_corrupt_model_onnx(package, tmp_path, capsys, damage):
    copy = _copy(package, tmp_path)
    graph = copy / "model.onnx"
    data = graph.read_bytes()
    graph.write_bytes(bytes(range(256)) * 8 if damage == "garbage" else data[: len(data) // 2])
    assert str(graph) in _generate(capsys, copy)


BPE = {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2}, "merges": ["a b"]}  # "ab" is no token


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("tokenizer.json", "\x00not json{", "unreadable .*tokenizer.json: "),
        ("tokenizer.json", "[1, 2]", "tokenizer.json is not a JSON object"),
        ("tokenizer.json", json.dumps({"model": BPE}), "added_tokens must be a list"),
        (
            "tokenizer.json",
            json.dumps({"added_tokens": [{"id": "x", "content": 5}], "model": BPE}),
            r"added_tokens\[0\] is not an object with an id",
        ),
        ("tokenizer.json", json.dumps({"added_tokens": [], "model": [1]}), "model must be"),
        (
            "tokenizer.json",
            json.dumps({"added_tokens": [], "model": {**BPE, "vocab": [1, 2]}}),
            "model.vocab must be an object",
        ),
        # tokenizers panics (a Rust abort) on a merge whose result is not in the vocabulary.
        (
            "tokenizer.json",
            json.dumps({"added_tokens": [], "model": BPE}),
            r"model.merges\[0\] makes 'ab', which is not in the vocabulary",
        ),
        ("tokenizer_config.json", "[1]", "tokenizer_config.json is not a JSON object"),
    ],
    ids=[
        "garbage",
        "not-an-object",
        "no-added-tokens",
        "added-token-types",
        "model-not-object",
        "vocab-not-object",
        "merge-outside-vocab",
        "config-not-object",
    ],
)
def test_generate_refuses_a_corrupt_tokenizer(package, tmp_path, capsys, name, content, message):
    copy = _copy(package, tmp_path)
    if name == "tokenizer_config.json":
        (copy / "tokenizer.json").write_text(json.dumps({"added_tokens": [], "model": {}}))
    (copy / name).write_text(content)
    line = _generate(capsys, copy)
    assert str(copy / name) in line
    assert re.search(message, line), line


def test_a_sound_package_still_generates(package, tmp_path):
    """The checks refuse only what is broken: a real byte-level tokenizer loads and runs."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mobius.generate import TextGenerator

    copy = _copy(package, tmp_path)
    vocab = {chr(ord("a") + i): i for i in range(26)} | {"ab": 26}
    tokenizer = Tokenizer(models.BPE(vocab, [("a", "b")]))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="z").save_pretrained(copy)
    generator = TextGenerator(copy)
    assert generator.encode_prompt("ab c", chat_template=False) == [26, 2]
    ids = list(generator.generate_ids([1, 2], max_new_tokens=2))
    assert len(ids) <= 2 and all(isinstance(i, int) for i in ids)
    assert np.all(np.asarray(ids) >= 0)
