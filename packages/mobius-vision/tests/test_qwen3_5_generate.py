"""Qwen3.5 and Qwen3.5-MoE packages: their processor, ``mobius generate`` and ``mobius info``,
against transformers.

Each family's tiny parity case (``vl_parity_cases/qwen3_5.py``) is made as a random model
with every parameter perturbed and saved with its real processor (``Qwen3VLProcessor``
over the PIL image processor), then built once with the CLI (split form). The tokenizer is
a tiny ``Qwen3_5Tokenizer`` (byte-level BPE, one character a token): transformers'
``AutoTokenizer`` loads that class for every ``qwen3_5`` checkpoint whatever its
tokenizer files name, so the word-level tokenizer of the parity cases would not survive
the package. Then:

- the package's torch-free processor (``qwen_vl:QwenVLProcessor``) gives the ids, pixels,
  grids and token types transformers' processor gives, and the M-RoPE positions the
  torch model's ``get_rope_index`` gives;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- ``mobius info`` on the checkpoint directory names the composition it builds.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import BuiltVL
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.qwen2_vl import SPECIAL_TOKENS
from vl_parity_cases.qwen3_5 import CASES

from mobius.cli import main
from mobius_vision.processing import processor_for

#: family -> its case
FAMILIES = {
    "qwen3_5": "qwen3_5-hybrid-two-sizes",
    "qwen3_5_moe": "qwen3_5_moe-default-rope-tied",
}
SIZES = ((37, 45), (45, 20), (16, 16), (70, 50))


def tiny_qwen3_5_tokenizer(vocab_size: int):
    """A ``Qwen3_5Tokenizer`` of ``vocab_size`` ids: the Qwen-VL special tokens at the parity
    cases' ids, ``<|endoftext|>``, then single byte-level characters (no merges)."""
    from transformers.models.qwen3_5.tokenization_qwen3_5 import Qwen3_5Tokenizer

    specials = {"<|endoftext|>": 0, **SPECIAL_TOKENS}
    free = [i for i in range(vocab_size) if i not in specials.values()]
    characters = ["\u0120", *(chr(c) for c in range(33, 127))]  # "\u0120": the space
    vocab = {**dict(zip(characters, free, strict=False)), **specials}
    tokenizer = Qwen3_5Tokenizer(vocab=vocab, merges=[], padding_side="left")
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    return tokenizer


class Built(BuiltVL):
    """One family's case (:data:`FAMILIES`), with the tiny ``Qwen3_5Tokenizer``."""

    sharpen = False

    def __init__(self, family: str, root) -> None:
        super().__init__(CASES[FAMILIES[family]], root, family)
        self.prompt = self.options["prompts"][0]

    def make_processor(self, make_processor, config):
        processor = make_processor(config)
        processor.tokenizer = tiny_qwen3_5_tokenizer(config.text_config.vocab_size)
        return processor


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    return Built(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("images") / "wide.png"
    Image.fromarray(random_image((37, 45), seed=1)).save(path)
    return path


def test_processor_and_positions_match_transformers(built):
    mine = processor_for(built.package, built.family)
    rope_positions = built.options["rope_positions"]
    pairs = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    pairs.append((mine.with_placeholders("w5 w7", 2), [random_image(s, 9) for s in SIZES[:2]]))
    for prompt, images in pairs:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        positions, deltas = rope_positions(built.model, expected)
        got_positions, got_deltas = mine.rope_positions(got)
        np.testing.assert_array_equal(got_positions, positions, err_msg=what)
        np.testing.assert_array_equal(got_deltas, deltas, err_msg=what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    from PIL import Image

    expected = built.greedy_text(built.prompt, [np.asarray(Image.open(image_file).convert("RGB"))])
    assert built.greedy_text(built.prompt, [random_image((37, 45), seed=2)]) != expected
    capsys.readouterr()  # the build's lines
    args = [str(built.package), built.prompt, "--image", str(image_file), "--max-new-tokens", "8"]
    assert main(["generate", *args]) == 0
    out, err = capsys.readouterr()
    assert out == expected + "\n"
    assert "new tokens" in err


def test_generate_text_only_matches_transformers(built, capsys):
    expected = built.greedy_text("w5 w7 w9", [])
    assert expected  # some text to compare
    capsys.readouterr()
    assert main(["generate", str(built.package), "w5 w7 w9", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_info_names_the_composition(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    model_class = {"qwen3_5": "Qwen3_5", "qwen3_5_moe": "Qwen3_5Moe"}[built.family]
    assert f"mobius-vision ({model_class}ForConditionalGeneration)" in out
    assert "vision-language" in out
    assert f"{built.family} whole: vision/, embedding/ and decoder/ graphs" in out


def test_mrope_section_that_misses_rotary_channels_is_refused(tmp_path, capsys):
    """``mrope_section`` must cover the rotary channel pairs (``partial_rotary_factor`` of
    ``head_dim``, halved): a one-line error names the section and the count."""
    config = CASES[FAMILIES["qwen3_5"]][1]()
    # a new dict: the case's rope_parameters is shared by every config the case makes
    rope = dict(config.text_config.rope_parameters, mrope_section=[2, 3, 4])
    config.text_config.rope_parameters = rope
    config.save_pretrained(tmp_path / "hf")
    assert main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert (
        "qwen3_5_text: mrope_section [2, 3, 4] does not cover the 8 rotary channel pairs"
        in (lines[0])
    )
