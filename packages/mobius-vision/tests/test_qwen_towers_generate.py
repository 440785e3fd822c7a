"""The families over Qwen-VL-style patch towers (Cosmos3 Omni, HyperCLOVA X SEED Vision V2,
VideoLLaMA3, PaddleOCR-VL):
their processor, ``mobius generate`` and ``mobius info``, against transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed and saved with its real processor (over its PIL image
processor), then built once with the CLI (split form). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing`) gives the ids,
  pixels and grids transformers' processor gives (images wide, tall, small, over the pixel
  bound; two in a prompt), and, for the M-RoPE families, the positions the torch model's
  ``get_rope_index`` gives;
- ``mobius generate PKG PROMPT --image FILE`` and a text-only prompt print what
  transformers' greedy ``generate`` decodes;
- ``mobius info`` on the checkpoint names the composition;
- a checkpoint in the other layout a family's checkpoints come in (transformers' own
  module tree, or the hub's) builds and generates the same;
- a VideoLLaMA3 package whose image processor merges patches, and placeholders that
  miscount the images, are one-line errors;
- a unified Cosmos3 checkpoint (the Generator's and the sound/action towers' tensors
  beside the Reasoner's) builds, those tensors ignored.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import (
    BuiltVL,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
)
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.cosmos3_omni import CASES as COSMOS3_OMNI_CASES
from vl_parity_cases.hyperclovax_vision_v2 import CASES as HYPERCLOVAX_CASES
from vl_parity_cases.paddleocr_vl import CASES as PADDLEOCR_VL_CASES
from vl_parity_cases.qwen2_vl import SPECIAL_TOKENS
from vl_parity_cases.video_llama_3 import CASES as VIDEO_LLAMA_3_CASES

from mobius.cli import main
from mobius.testing import build_with_cli
from mobius.weights import rename_prefixes
from mobius_vision.processing import processor_for

#: family -> (its case, the model class ``mobius info`` names)
FAMILIES = {
    "cosmos3_omni": (
        COSMOS3_OMNI_CASES["cosmos3_omni-deepstack-two-sizes"],
        "Cosmos3OmniForConditionalGeneration",
    ),
    "hyperclovax_vision_v2": (
        HYPERCLOVAX_CASES["hyperclovax_vision_v2-no-post-norm-untied"],
        "HyperCLOVAXVisionV2ForConditionalGeneration",
    ),
    "video_llama_3": (
        VIDEO_LLAMA_3_CASES["video_llama_3-qwen2-two-sizes"],
        "VideoLlama3ForConditionalGeneration",
    ),
    "paddleocr_vl": (
        PADDLEOCR_VL_CASES["paddleocr_vl-two-sizes"],
        "PaddleOCRVLForConditionalGeneration",
    ),
}
# wide, tall, a side under one merge block (scaled up first), over the pixel bound
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


def tiny_gpt2_tokenizer(vocab_size: int):
    """A ``GPT2Tokenizer`` of ``vocab_size`` ids: the Qwen-VL special tokens at the parity
    cases' ids, ``<|endoftext|>``, then single byte-level characters (no merges).

    transformers' ``AutoTokenizer`` loads ``GPT2Tokenizer`` for every
    ``hyperclovax_vision_v2`` package, so the word-level tokenizer of the parity cases would
    not survive the package."""
    from transformers import GPT2Tokenizer

    specials = {"<|endoftext|>": 0, **SPECIAL_TOKENS}
    free = [i for i in range(vocab_size) if i not in specials.values()]
    characters = ["\u0120", *(chr(c) for c in range(33, 127))]  # "\u0120": the space
    vocab = {**dict(zip(characters, free, strict=False)), **specials}
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=[])
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    return tokenizer


#: Families whose packages load a tokenizer class of their own, and how to make it tiny.
TOKENIZERS = {"hyperclovax_vision_v2": tiny_gpt2_tokenizer}


class Built(BuiltVL):
    """One family's case (:data:`FAMILIES`), with the tokenizer its packages load."""

    def __init__(self, family: str, root) -> None:
        self.family = family
        super().__init__(FAMILIES[family][0], root, family)
        self.prompt = self.options["prompts"][0]

    def make_processor(self, make_processor, config):
        processor = make_processor(config)
        if self.family in TOKENIZERS:
            processor.tokenizer = TOKENIZERS[self.family](config.text_config.vocab_size)
        return processor


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    return Built(request.param, tmp_path_factory.mktemp(request.param))


def test_processor_and_positions_match_transformers(built):
    mine = processor_for(built.package, built.family)
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases.append((mine.with_placeholders("w5 w7", 2), two))
    rope = built.options.get("rope_positions")
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        if rope is None:
            assert mine.rope_positions(got) is None
            continue
        positions, deltas = mine.rope_positions(got)
        want_positions, want_deltas = rope(built.model, expected)
        np.testing.assert_array_equal(positions, want_positions, err_msg=what)
        np.testing.assert_array_equal(deltas, want_deltas, err_msg=what)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_info_names_the_composition(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert f"mobius-vision ({FAMILIES[built.family][1]})" in out
    assert "vision-language" in out


#: family -> how its saved checkpoint's names read in the family's other layout: prefixes
#: renamed, then parts of names replaced
OTHER_LAYOUTS = {
    # the Qwen3-VL tree; Qwen3's names for q, o and the key norm, Diffusers' for the rest
    "cosmos3_omni": (
        {
            **{p: f"model.language_model.{p}" for p in ("layers.", "embed_tokens.", "norm.")},
            **{
                p: f"model.visual.{p}"
                for p in ("blocks.", "merger.", "patch_embed.", "pos_embed.", "deepstack_")
            },
        },
        {".to_q.": ".q_proj.", ".to_out.": ".o_proj.", ".norm_k.": ".k_norm."},
    ),
    # the decoder nested whole under model.language_model (the hub's), transformers' projector
    "hyperclovax_vision_v2": (
        {
            "model.language_model.lm_head.": "lm_head.",
            "model.language_model.": "model.language_model.model.",
            "model.vision_projector.": "model.projector.",
        },
        {},
    ),
    # transformers' tree (the saved checkpoint is the hub's: visual, mlp_AR, model)
    "paddleocr_vl": (
        {
            "visual.": "model.visual.",
            "mlp_AR.": "model.projector.",
            "model.": "model.language_model.",
        },
        {},
    ),
}


def other_layout(tensors: dict, family: str) -> dict:
    prefixes, parts = OTHER_LAYOUTS[family]
    renamed = {}
    for name, value in rename_prefixes(tensors, prefixes).items():
        for old, new in parts.items():
            name = name.replace(old, new)
        renamed[name] = value
    return renamed


@pytest.mark.parametrize("built", sorted(OTHER_LAYOUTS), indirect=True)
def test_the_other_checkpoint_layout_builds_the_same_model(built, tmp_path, capsys):
    import shutil

    from safetensors.numpy import load_file, save_file

    other = tmp_path / "other"
    shutil.copytree(built.hf, other)
    tensors = load_file(other / "model.safetensors")
    renamed = other_layout(tensors, built.family)
    assert len(renamed) == len(tensors) and renamed.keys() != tensors.keys()
    save_file(renamed, other / "model.safetensors", metadata={"format": "pt"})
    package = build_with_cli(other, tmp_path / "out", "--form", "split")
    capsys.readouterr()
    assert main(["generate", str(package), "w5 w7 w9", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == built.greedy_text("w5 w7 w9", []) + "\n"


#: A unified Cosmos3 checkpoint's tensors the Reasoner does not read (one per pattern kind).
UNIFIED_EXTRAS = (
    "layers.0.self_attn.add_q_proj.weight",
    "layers.0.self_attn.norm_added_k.weight",
    "layers.1.moe_gen.experts.0.weight",
    "proj_out.weight",
    "time_embedder.linear_1.weight",
    "audio_modality_embed",
    "action_proj_in.weight",
)


@pytest.mark.parametrize("built", ["cosmos3_omni"], indirect=True)
def test_unified_cosmos3_checkpoint_builds_the_reasoner(built, tmp_path, capsys):
    """The Generator's and the sound/action towers' tensors are ignored; the Reasoner's
    graphs are those of the plain checkpoint."""
    import shutil

    from safetensors.numpy import load_file, save_file

    unified = tmp_path / "unified"
    shutil.copytree(built.hf, unified)
    tensors = load_file(unified / "model.safetensors")
    assert "layers.0.self_attn.to_q.weight" in tensors  # the flat, Diffusers-named layout
    tensors.update({name: np.ones((2, 2), np.float32) for name in UNIFIED_EXTRAS})
    save_file(tensors, unified / "model.safetensors", metadata={"format": "pt"})
    package = build_with_cli(unified, tmp_path / "out", "--form", "split")
    capsys.readouterr()
    assert main(["generate", str(package), "w5 w7 w9", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == built.greedy_text("w5 w7 w9", []) + "\n"


@pytest.mark.parametrize("built", ["video_llama_3"], indirect=True)
def test_video_llama_3_merged_images_are_a_one_line_error(built, image_file, tmp_path, capsys):
    """The graphs take unmerged patches: a package whose image processor merges is refused."""
    import json
    import shutil

    package = tmp_path / "merged"
    shutil.copytree(built.package, package)
    settings_file = package / "preprocessor_config.json"
    settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
    settings_file.write_text(json.dumps(dict(settings, merge_size=2)))
    capsys.readouterr()
    assert main(["generate", str(package), "w5", "--image", str(image_file)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "merges 2x2 patches" in lines[0]


@pytest.mark.parametrize("built", ["paddleocr_vl"], indirect=True)
def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)
