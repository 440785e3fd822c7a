"""``mobius build --validate`` on mobius-vision's tasks: tiny models pass, broken packages fail.

One tiny random model per task (every parameter perturbed; the parity tests' cases):
a ViT classifier, a CLIP dual encoder, a LLaVA in both forms, a Mllama, and a TrOCR, a
Pix2Struct and a BLIP captioner, each built with ``--validate`` through the CLI against
transformers' own ``from_pretrained``. A package whose weight was changed after the
build fails; without torch a smoke inference of the same sample passes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import assert_smoke_passes, assert_validation_fails, broken_copy
from mobius.validate import validate_package
from mobius_vision.testing import make_random_dual_encoder, make_random_vision_model
from mobius_vision.testing._cross_vl_parity import open_gates
from mobius_vision.testing._vl_parity import make_random_vl_model

#: The bar of these float32 tiny models (the parity tests').
ATOL = 1e-4


def _build(source: Path, out: Path, *extra: str) -> Path:
    assert main(["build", "--model", str(source), str(out), "-q", "--validate", *extra]) == 0
    return out


def _validation(out: Path) -> dict:
    return json.loads((out / "mobius.json").read_text())["validation"]


def _assert_passed(out: Path, reference: str, tokens: bool) -> None:
    validation = _validation(out)
    assert validation["passed"] is True, validation
    assert validation["reference"] == reference
    assert validation["diffs"] and max(validation["diffs"].values()) <= ATOL, validation
    assert validation["tokens_agree"] is (True if tokens else None)


# -- image classification -------------------------------------------------------------


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> tuple[Path, Path]:
    from vision_parity_cases.vit import VIT

    root = tmp_path_factory.mktemp("vit")
    model = make_random_vision_model(AutoConfig.for_model("vit", **VIT), "image-classification")
    model.save_pretrained(root / "hf")
    return root / "hf", _build(root / "hf", root / "out")


def test_image_classifier_validates(vit):
    _assert_passed(vit[1], "transformers ViTForImageClassification", tokens=False)
    assert set(_validation(vit[1])["diffs"]) == {"logits"}


def test_image_classifier_with_a_changed_weight_fails(vit, tmp_path):
    source, out = vit
    assert_validation_fails(
        broken_copy(out, tmp_path / "broken", "model.onnx", "classifier.weight"), source
    )


def test_image_classifier_smoke_run(vit, monkeypatch, tmp_path):
    assert_smoke_passes(vit[1], vit[0], monkeypatch, tmp_path / "copy")


def test_bare_vision_encoder_validates_against_automodel(tmp_path):
    from vision_parity_cases.vit import VIT

    model = make_random_vision_model(AutoConfig.for_model("vit", **VIT), "none")
    model.save_pretrained(tmp_path / "hf")
    out = _build(tmp_path / "hf", tmp_path / "out", "--head", "none")
    _assert_passed(out, "transformers ViTModel", tokens=False)
    assert set(_validation(out)["diffs"]) == {"last_hidden_state", "pooler_output"}


# -- zero-shot image classification ---------------------------------------------------


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> tuple[Path, Path]:
    from test_zero_shot_parity import ZERO_SHOT_CASES

    root = tmp_path_factory.mktemp("clip")
    model_type, overrides, _ = ZERO_SHOT_CASES["clip"]
    make_random_dual_encoder(AutoConfig.for_model(model_type, **overrides)).save_pretrained(
        root / "hf"
    )
    return root / "hf", _build(root / "hf", root / "out")


def test_zero_shot_validates(clip):
    _assert_passed(clip[1], "transformers CLIPModel", tokens=False)
    assert set(_validation(clip[1])["diffs"]) == {
        "logits_per_image", "logits_per_text", "text_embeds", "image_embeds",
    }  # fmt: skip


def test_zero_shot_with_a_changed_weight_fails(clip, tmp_path):
    source, out = clip
    assert_validation_fails(
        broken_copy(out, tmp_path / "broken", "model.onnx", "visual_projection.weight"), source
    )


def test_zero_shot_smoke_run(clip, monkeypatch, tmp_path):
    assert_smoke_passes(clip[1], clip[0], monkeypatch, tmp_path / "copy")


# -- vision-language, split and single forms ------------------------------------------


@pytest.fixture(scope="module")
def llava(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """A tiny LLaVA with its processor saved beside it, built in both forms."""
    from vl_parity_cases.llava import TEXT_CONFIGS, llava_config, llava_processor

    root = tmp_path_factory.mktemp("llava")
    config = llava_config(TEXT_CONFIGS["llama"])()
    make_random_vl_model(config).save_pretrained(root / "hf")
    llava_processor(config).save_pretrained(root / "hf")
    forms = {form: _build(root / "hf", root / form, "--form", form) for form in ("split", "single")}
    return root / "hf", forms


@pytest.mark.parametrize("form", ["split", "single"])
def test_vision_language_validates(llava, form):
    out = llava[1][form]
    _assert_passed(out, "transformers LlavaForConditionalGeneration", tokens=True)
    assert "mobius's llava processor" in _validation(out)["checked"]


def test_vision_language_with_a_changed_projector_fails(llava, tmp_path):
    source, forms = llava
    broken = broken_copy(
        forms["split"], tmp_path / "broken", "vision/model.onnx", "linear_2.weight"
    )
    assert_validation_fails(broken, source)


@pytest.mark.parametrize("form", ["split", "single"])
def test_vision_language_smoke_run(llava, form, monkeypatch, tmp_path):
    assert_smoke_passes(llava[1][form], llava[0], monkeypatch, tmp_path / "copy")


# -- cross-attention vision-language (Mllama) -----------------------------------------


@pytest.fixture(scope="module")
def mllama(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny Mllama, its tanh gates opened (so the image matters), with its processor."""
    from test_mllama_parity import mllama_config, mllama_processor

    root = tmp_path_factory.mktemp("mllama")
    config = mllama_config()
    model = make_random_vl_model(config)
    open_gates(model)
    model.save_pretrained(root / "hf")
    mllama_processor(config).save_pretrained(root / "hf")
    return root / "hf", _build(root / "hf", root / "out")


def test_cross_attention_vl_validates(mllama):
    _assert_passed(mllama[1], "transformers MllamaForConditionalGeneration", tokens=True)


def test_cross_attention_vl_with_a_changed_vision_weight_fails(mllama, tmp_path):
    source, out = mllama
    broken = broken_copy(
        out, tmp_path / "broken", "vision/model.onnx", "multi_modal_projector.weight"
    )
    assert_validation_fails(broken, source)


def test_cross_attention_vl_smoke_run(mllama, monkeypatch, tmp_path):
    assert_smoke_passes(mllama[1], mllama[0], monkeypatch, tmp_path / "copy")


def test_a_config_value_out_of_range_is_a_one_line_error(vit, tmp_path):
    source, out = vit
    copy = shutil.copytree(out, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(dict(config, image_size=10**9)))
    with pytest.raises(MobiusError, match="config.json's image_size is 1000000000"):
        validate_package(copy, source)


# -- image to text --------------------------------------------------------------------

IMAGE_TO_TEXT = {  # parity case -> (transformers class, a decoder weight to break)
    "trocr": ("VisionEncoderDecoderModel", "output_projection.weight"),
    "pix2struct": ("Pix2StructForConditionalGeneration", "lm_head.weight"),
    "blip": ("BlipForConditionalGeneration", "predictions.decoder.weight"),
}


@pytest.fixture(scope="module", params=sorted(IMAGE_TO_TEXT))
def image_to_text(request, tmp_path_factory) -> tuple[str, Path, Path]:
    from test_image_to_text_parity import CASES

    from mobius_vision.testing._image_to_text_parity import make_random_image_to_text

    _, make_config = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    make_random_image_to_text(make_config()).save_pretrained(root / "hf")
    return request.param, root / "hf", _build(root / "hf", root / "out")


def test_image_to_text_validates(image_to_text):
    case, _, out = image_to_text
    _assert_passed(out, f"transformers {IMAGE_TO_TEXT[case][0]}", tokens=True)
    assert set(_validation(out)["diffs"]) == {
        "encoder last_hidden_state",
        "prefill logits",
        "decode logits",
    }


def test_image_to_text_with_a_changed_decoder_weight_fails(image_to_text, tmp_path):
    case, source, out = image_to_text
    weight = IMAGE_TO_TEXT[case][1]
    assert_validation_fails(
        broken_copy(out, tmp_path / "broken", "decoder/model.onnx", weight), source
    )


def test_image_to_text_smoke_run(image_to_text, monkeypatch, tmp_path):
    _, source, out = image_to_text
    assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")


# -- audio, vision and language (the Omni thinkers) -----------------------------------

OMNI = {  # parity case -> the class --validate compares with
    "qwen2_5_omni": "Qwen2_5OmniThinkerForConditionalGeneration",  # the whole model's thinker
    "qwen3_omni_moe_thinker": "Qwen3OmniMoeThinkerForConditionalGeneration",
    "gemma4_unified": "Gemma4UnifiedForConditionalGeneration",
}


@pytest.fixture(scope="module", params=sorted(OMNI))
def omni(request, tmp_path_factory) -> tuple[str, Path, Path]:
    """The case's checkpoint with its processor's files (the generate tests' ``Built``)."""
    case = request.param
    root = tmp_path_factory.mktemp(case)
    if case == "gemma4_unified":
        from test_gemma4_audio_generate import Built as Gemma4Unified

        built = Gemma4Unified(root)
    else:
        from test_omni_generate import Built

        built = Built(case, root)
    return case, built.hf, _build(built.hf, root / "validated")


def test_audio_vision_language_validates(omni):
    case, _, out = omni
    _assert_passed(out, f"transformers {OMNI[case]}", tokens=True)
    assert "s of audio" in _validation(out)["checked"]


def test_audio_vision_language_with_a_changed_audio_weight_fails(omni, tmp_path):
    _, source, out = omni
    broken = broken_copy(out, tmp_path / "broken", "audio/model.onnx", "proj")
    assert_validation_fails(broken, source)


def test_audio_vision_language_smoke_run(omni, monkeypatch, tmp_path):
    _, source, out = omni
    assert_smoke_passes(out, source, monkeypatch, tmp_path / "copy")


# -- families whose generate decodes with an inner language model ---------------------

INNER_DECODER = {  # parity case -> the class --validate compares with
    "blip-2-opt": "Blip2ForConditionalGeneration",
    "kosmos-2": "Kosmos2ForConditionalGeneration",
}


@pytest.mark.parametrize("case", sorted(INNER_DECODER))
def test_inner_decoder_families_validate(case, tmp_path):
    """BLIP-2's and Kosmos-2's forward want the image on every call; --validate decodes with
    their language model, as their ``generate`` does."""
    from _vl_built import BuiltVL
    from vl_parity_cases import all_cases

    built = BuiltVL(all_cases()[case], tmp_path, all_cases()[case][0])
    out = _build(built.hf, tmp_path / "validated")
    _assert_passed(out, f"transformers {INNER_DECODER[case]}", tokens=True)
