"""onnxruntime-genai runs a Phi-4-multimodal package mobius writes, with its ``phi4mm`` class.

A tiny random ``Phi4MultimodalForCausalLM`` (:mod:`phi4mm_case`, every parameter perturbed)
is built with ``--runtime ort-genai``: the build writes ``genai_config.json`` (vision,
speech, embedding and decoder sections naming mobius' graphs) and the generator's
``processor_config.json`` and ``audio_processor_config.json``. Then the generator's greedy
tokens are transformers' for a text prompt, an image, audio, and both.

The case differs from :mod:`phi4mm_case` where the generator hard-codes the real model:
the placeholder ids 200010 (image) and 200011 (audio), so the vocabulary is the real
size, and a 448-pixel crop in 14-pixel patches (its image ops assume both). The
generator's own preprocessing is compared with transformers' (:mod:`mobius_vision.models.
phi4_multimodal_genai` says where they differ): a 448x300 image (no resampling) gives
transformers' pixels, mask, sizes and prompt exactly; the log-mel features of a clip
come from another float32 STFT (close, not equal), so the audio prompts run the
generator on transformers' features (the rest of its inputs its own).
"""

from __future__ import annotations

import json
import sys
import wave

import numpy as np
import pytest

from mobius.genai import GenAIUnsupportedError
from mobius.testing import build_with_cli, genai_greedy, perturb_parameters, torch_greedy
from mobius_vision.testing._omni_parity import make_random_model

if sys.version_info < (3, 11):
    # Not a dev dependency there: onnxruntime-genai 0.18 needs onnxruntime >= 1.31.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

import onnxruntime_genai as og  # noqa: E402
from phi4mm_case import NumpyPhi4ImageProcessor, phi4mm_config  # noqa: E402
from test_genai_vision_language import _bpe_tokenizer, _genai_steps  # noqa: E402

IMAGE_ID, AUDIO_ID = 200010, 200011  # onnxruntime-genai's phi4mm processor's, hard-coded
IMAGE, AUDIO = "<|endoftext10|>", "<|endoftext11|>"  # what it turns <|image_1|>... into
CROP, PATCH, MAX_CROPS = 448, 14, 4
NEW_TOKENS = 6


class GenAIPhi4ImageProcessor(NumpyPhi4ImageProcessor):
    """The case's image processor at the geometry onnxruntime-extensions assumes."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.size = {"height": CROP, "width": CROP}
        self.patch_size, self.dynamic_hd = PATCH, MAX_CROPS


def _config():
    config = phi4mm_config()
    config.vocab_size = 200064
    config.tie_word_embeddings = True  # one 200064-row table, not two
    config.vision_config.image_size = config.vision_config.crop_size = CROP
    config.vision_config.patch_size = PATCH
    config.vision_config.image_token_id = IMAGE_ID
    audio = dict(config.audio_config.to_dict(), audio_token_id=AUDIO_ID)
    audio["input_size"] = 80  # the feature extractor's mel bins
    del audio["nemo_final_size"]  # derived from input_size
    config.audio_config = type(config.audio_config)(**audio)
    return config


def _write_wav(path, seconds: float, seed: int) -> np.ndarray:
    """A 16 kHz 16-bit mono noise clip at ``path``; returns its samples as float32 in [-1, 1)."""
    samples = (np.random.default_rng(seed).standard_normal(int(16000 * seconds)) * 3000).astype(
        "<i2"
    )
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(samples.tobytes())
    return samples.astype(np.float32) / 32768


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(transformers model, transformers processor, package dir, image file, wav file, samples)."""
    from PIL import Image
    from transformers import Phi4MultimodalFeatureExtractor, Phi4MultimodalProcessor

    tmp = tmp_path_factory.mktemp("phi4mm_genai")
    config = _config()
    model = make_random_model(config, "Phi4MultimodalForCausalLM", seed=0)
    perturb_parameters(model, seed=2, scale=0.5)  # so that the text follows the image
    model.save_pretrained(tmp / "hf")
    tokenizer = _bpe_tokenizer(config.vocab_size, {IMAGE: IMAGE_ID, AUDIO: AUDIO_ID}, tmp / "hf")
    tokenizer._set_model_specific_special_tokens({"image_token": IMAGE, "audio_token": AUDIO})
    image_processor, audio_processor = GenAIPhi4ImageProcessor(), Phi4MultimodalFeatureExtractor()
    settings = {
        # as transformers saves it (the case's class stands in for its torchvision one)
        "image_processor": dict(
            image_processor.to_dict(), image_processor_type="Phi4MultimodalImageProcessorFast"
        ),
        "feature_extractor": audio_processor.to_dict(),
    }
    (tmp / "hf" / "processor_config.json").write_text(json.dumps(settings))
    processor = Phi4MultimodalProcessor(
        image_processor=image_processor, audio_processor=audio_processor, tokenizer=tokenizer
    )
    out = build_with_cli(tmp / "hf", tmp / "onnx", "--ep", "cpu", "--runtime", "ort-genai")
    image = tmp / "image.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (300, 448, 3), np.uint8)).save(image)
    wav = tmp / "clip.wav"
    samples = _write_wav(wav, 0.6, seed=3)
    return model, processor, out, image, wav, samples


@pytest.fixture(scope="module")
def genai_model(built):
    return og.Model(str(built[2]))


def test_genai_config_names_the_four_graphs(built):
    out = built[2]
    model = json.loads((out / "genai_config.json").read_text())["model"]
    assert model["type"] == "phi4mm"
    assert model["vision"]["inputs"] == {
        "pixel_values": "image_pixel_values",
        "image_sizes": "image_sizes",
        "attention_mask": "image_attention_mask",
    }
    assert model["speech"]["filename"] == "audio/model.onnx"
    assert model["speech"]["inputs"] == {
        "audio_embeds": "input_features",
        "attention_mask": "feature_attention_mask",
        "audio_sizes": "audio_sizes",
        "audio_projection_mode": "audio_projection_mode",
    }
    assert model["embedding"]["inputs"] == {
        "input_ids": "input_ids",
        "image_features": "image_features",
        "audio_features": "audio_features",
    }
    image = json.loads((out / "processor_config.json").read_text())["processor"]
    preprocess = image["transforms"][1]["operation"]
    assert preprocess["attrs"] == {"dynamic_hd": MAX_CROPS, "dyhd_base_resolution": CROP}
    assert (out / "audio_processor_config.json").is_file()


def test_genai_runs_a_text_prompt(built, genai_model):
    prompt = [1, 6, 7, 9, 10, 12, 8]
    expected = torch_greedy(built[0], prompt, NEW_TOKENS, eos="suppress")
    assert genai_greedy(genai_model, prompt, NEW_TOKENS) == expected


def _reference(model, inputs, new_tokens: int):
    """transformers' greedy tokens and each step's logits after the processor's ``inputs``."""
    import torch

    with torch.inference_mode():
        out = model.generate(
            **inputs,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    length = inputs["input_ids"].shape[1]
    return out.sequences[0, length:].tolist(), [step[0].numpy() for step in out.logits]


def _assert_same_run(genai_model, built, genai_inputs, expected):
    """The generator's tokens and logits from ``genai_inputs`` are transformers' (``expected``)."""
    length = expected["input_ids"].shape[1]
    tokens, logits = _genai_steps(genai_model, genai_inputs, length, NEW_TOKENS)
    want_tokens, want_logits = _reference(built[0], expected, NEW_TOKENS)
    assert tokens == want_tokens
    for step, (got, want) in enumerate(zip(logits, want_logits, strict=True)):
        diff = np.abs(got - want).max()
        assert diff <= 1e-4, f"step {step}: max abs diff {diff}"


def test_genai_runs_an_image_prompt_with_its_own_preprocessing(built, genai_model):
    """448x300 needs no resampling: the generator's inputs are transformers' (pixels to 1 ulp)."""
    from PIL import Image

    model, processor, _, image, _, _ = built
    expected = processor(
        text=[f"ab {IMAGE} w3 xyz:"], images=[Image.open(image)], return_tensors="pt"
    )
    inputs = genai_model.create_multimodal_processor()(
        "ab <|image_1|> w3 xyz:", images=og.Images.open(str(image))
    )
    assert (inputs["input_ids"].as_numpy() == IMAGE_ID).sum() == 460
    np.testing.assert_array_equal(inputs["input_ids"].as_numpy(), expected["input_ids"])
    np.testing.assert_array_equal(inputs["image_sizes"].as_numpy(), expected["image_sizes"])
    for genai_name, name in (
        ("pixel_values", "image_pixel_values"),
        ("image_attention_mask", "image_attention_mask"),
    ):
        got = inputs[genai_name].as_numpy()  # (rescale and normalise in float32: 1 ulp)
        np.testing.assert_allclose(got, expected[name].numpy(), rtol=0, atol=1e-6, err_msg=name)
    assert inputs["audio_projection_mode"].as_numpy().tolist() == [1]  # images only
    _assert_same_run(genai_model, built, inputs, expected)


def _audio_inputs(built, genai_model, with_image: bool):
    """transformers' inputs and the generator's, for a prompt with the clip (and the image):
    the generator's own ids, sizes, mask and projection mode, transformers' log-mels."""
    from PIL import Image

    _, processor, _, image, wav, samples = built
    images = dict(images=[Image.open(image)]) if with_image else {}
    text = f"ab {IMAGE} w3 {AUDIO} xyz:" if with_image else f"ab {AUDIO} w3 xyz:"
    expected = processor(text=[text], audio=[samples], return_tensors="pt", **images)
    genai_images = dict(images=og.Images.open(str(image))) if with_image else {}
    prompt = text.replace(IMAGE, "<|image_1|>").replace(AUDIO, "<|audio_1|>")
    inputs = genai_model.create_multimodal_processor()(
        prompt, audios=og.Audios.open(str(wav)), **genai_images
    )
    np.testing.assert_array_equal(inputs["input_ids"].as_numpy(), expected["input_ids"])
    np.testing.assert_array_equal(
        inputs["audio_sizes"].as_numpy(), expected["audio_embed_sizes"].numpy()
    )
    features = expected["audio_input_features"].numpy()
    own = inputs["audio_embeds"].as_numpy()
    assert own.shape == features.shape and own.dtype == np.float32
    # float32 STFT against transformers' (module docstring): close, not equal
    assert np.abs(own - features).max() < 0.1 < np.abs(features).max()
    assert inputs["audio_attention_mask"].as_numpy().all()  # one clip, no padding
    inputs["audio_embeds"] = features
    return inputs, expected


def test_genai_runs_an_audio_prompt(built, genai_model):
    inputs, expected = _audio_inputs(built, genai_model, with_image=False)
    assert inputs["audio_projection_mode"].as_numpy().tolist() == [2]  # speech projection
    _assert_same_run(genai_model, built, inputs, expected)


def test_genai_runs_an_image_and_audio_prompt(built, genai_model):
    inputs, expected = _audio_inputs(built, genai_model, with_image=True)
    assert inputs["audio_projection_mode"].as_numpy().tolist() == [3]  # vision projection
    _assert_same_run(genai_model, built, inputs, expected)


def _hooks_config(crop: int = CROP, patch: int = PATCH, mels: int = 80):
    from types import SimpleNamespace

    return SimpleNamespace(
        crop_size=crop,
        vision=SimpleNamespace(patch_size=patch),
        audio=SimpleNamespace(input_size=mels),
    )


@pytest.mark.parametrize(
    "settings, why",
    [
        ({}, "no image processor settings"),
        ({"dynamic_hd": True}, "dynamic_hd True"),
        ({"dynamic_hd": -4}, "dynamic_hd -4"),
        ({"image_std": [0.5, 0, 0.5]}, "image_std"),
        ({"size": {"height": 224, "width": 224}}, "size"),
        ({"do_normalize": False}, "do_normalize"),
        ({"image_processor_type": "SiglipImageProcessor"}, "image_processor_type"),
    ],
)
def test_image_settings_a_checkpoint_gives_are_checked(settings, why):
    from mobius_vision.models.phi4_multimodal_genai import processor_config

    with pytest.raises(GenAIUnsupportedError, match=why):
        processor_config(_hooks_config(), settings)


@pytest.mark.parametrize(
    "settings, why",
    [
        ({"sampling_rate": 8000}, "sampling_rate 8000"),
        ({"feature_size": 64}, "64 mel bins"),
        ({"audio_compression_rate": "8"}, "audio_compression_rate"),
        ({"audio_downsample_rate": 2}, "audio_downsample_rate"),
    ],
)
def test_audio_settings_a_checkpoint_gives_are_checked(settings, why):
    from mobius_vision.models.phi4_multimodal_genai import audio_processor_config

    with pytest.raises(GenAIUnsupportedError, match=why):
        audio_processor_config(_hooks_config(), settings)


def test_a_tower_of_other_geometry_runs_text_prompts_only(tmp_path, capsys):
    """The case's 64-pixel crops in 2-pixel patches: genai_config.json, no image preprocessing."""
    model = make_random_model(phi4mm_config(), "Phi4MultimodalForCausalLM", seed=0)
    model.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "processor_config.json").write_text(
        json.dumps({"image_processor": {"dynamic_hd": 4}})
    )
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--runtime", "ort-genai")
    assert json.loads((out / "genai_config.json").read_text())["model"]["type"] == "phi4mm"
    assert not (out / "processor_config.json").exists()
    assert "the tower takes 64-pixel crops in 2-pixel patches" in capsys.readouterr().err
