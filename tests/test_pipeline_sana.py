"""A tiny random Sana pipeline: built whole with ``mobius build`` (its Gemma 2 text encoder
through mobius-text's text-encoder task), run by mobius's numpy runner and by diffusers from
the same latents, 2 DPM-Solver++ flow steps with CFG; the images agree to 1e-3 (measured
~1e-6). Also: which hidden states a pipeline's decoder text encoder is built with.

Every parameter is perturbed. The prompt goes behind Sana's default instruction (~150
tokens, past Gemma 2's sliding window), padded on the right; a learned sigma, a
``timestep_scale`` of 0.5 and a negative prompt each change the image if mishandled.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from pipeline_cases import PROMPT
from sana_pipeline_cases import make_sana_pipeline

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

HEIGHT, WIDTH = 64, 32  # multiples of 32, as diffusers asks; DC-AE factor 4: latents 16 x 8
MAX_SEQUENCE_LENGTH = 10  # the prompt's 6 words, the instruction's last words and 2 pads
OPTIONS = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def sana(tmp_path_factory):
    """(diffusers pipeline, its saved directory, built package directory)."""
    root = tmp_path_factory.mktemp("sana")
    pipe = make_sana_pipeline(root / "hf")
    return pipe, root / "hf", build_with_cli(root / "hf", root / "onnx")


def test_sana_builds_whole_and_matches_diffusers(sana):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, _, out = sana
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "Gemma2Model"
    assert built["transformer/model"] == "SanaTransformer2DModel"
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 8)).astype(np.float32)
    options = dict(OPTIONS, max_sequence_length=MAX_SEQUENCE_LENGTH, negative_prompt="a blue cat")
    with torch.no_grad():
        expected = pipe(
            PROMPT,
            latents=torch.from_numpy(latents),
            output_type="np",
            use_resolution_binning=False,
            clean_caption=False,
            **options,
        ).images
    runner = open_pipeline(out)
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("sana max abs diff", diff)
    assert diff <= 1e-3
    # the instruction and the negative prompt are both read: dropping either changes the image
    plain = runner(PROMPT, latents=latents, complex_human_instruction=[], **options)
    assert float(np.abs(plain - got).max()) > 1e-3


def test_generate_cli_writes_the_sana_image(sana, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, _, out = sana
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))


def test_a_bad_timestep_scale_is_refused_in_one_line(sana, tmp_path):
    from mobius_diffusion.pipeline import open_pipeline

    _, _, out = sana
    package = tmp_path / "package"
    shutil.copytree(out, package)
    config_path = package / "transformer" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "timestep_scale": "big"}))
    with pytest.raises(ConfigError, match="timestep_scale is 'big', not a positive number"):
        open_pipeline(package)(PROMPT, **OPTIONS)


def _text_encoder_only(hf, directory, pipeline_class):
    """A pipeline directory of ``hf``'s Gemma 2 text encoder and tokenizer, named ``pipeline_class``."""
    for part in ("text_encoder", "tokenizer"):
        shutil.copytree(hf / part, directory / part)
    index = json.loads((hf / "model_index.json").read_text())
    index = {
        k: v for k, v in index.items() if k.startswith("_") or k in ("text_encoder", "tokenizer")
    }
    (directory / "model_index.json").write_text(
        json.dumps({**index, "_class_name": pipeline_class})
    )
    return directory


def _outputs(graph_path):
    import onnx

    return [o.name for o in onnx.load(str(graph_path), load_external_data=False).graph.output]


def test_a_lumina2_like_text_encoder_is_built_with_the_states_it_reads(sana, tmp_path):
    _, hf, _ = sana
    lumina = _text_encoder_only(hf, tmp_path / "lumina", "Lumina2Pipeline")
    out = build_with_cli(lumina, tmp_path / "lumina-onnx")
    # 2 layers: hidden_states[-2] is hidden_states.1, the input of the last layer
    assert _outputs(out / "text_encoder" / "model.onnx") == ["last_hidden_state", "hidden_states.1"]
    out = build_with_cli(lumina, tmp_path / "lumina-all", "--hidden-states", "all")  # the user's
    assert _outputs(out / "text_encoder" / "model.onnx")[1:] == [
        f"hidden_states.{i}" for i in range(3)
    ]


def test_decoder_text_encoder_options_per_pipeline():
    from mobius_diffusion.decoder_text_encoders import component_plugin, text_encoder_key

    assert text_encoder_key("LlamaForCausalLM") == "LlamaModel"  # HiDream's text_encoder_4
    assert text_encoder_key("Qwen2_5_VLForConditionalGeneration") == "Qwen2_5_VLTextModel"
    assert text_encoder_key("Gemma2PreTrainedModel") == "Gemma2Model"
    assert text_encoder_key("CLIPTextModel") == "CLIPTextModel"
    plugin = {"hidden_states": None, "other": 1}
    assert component_plugin(plugin, "text-encoder", "HiDreamImagePipeline", "text_encoder_4") == {
        "other": 1,
        "hidden_states": "all",
    }
    assert component_plugin(plugin, "text-encoder", "SanaPipeline", "text_encoder") == {"other": 1}
    assert component_plugin(plugin, "text-encoder", "HunyuanVideoPipeline", "text_encoder") == {
        "other": 1,
        "hidden_states": "-3",
    }
    chosen = {"hidden_states": "0,-1"}  # the user's, to text encoders only
    assert component_plugin(chosen, "text-encoder", "Lumina2Pipeline", "text_encoder") == chosen
    assert component_plugin(chosen, "denoising", "Lumina2Pipeline", "transformer") == {}
    with pytest.raises(ConfigError, match="which hidden states a SomePipeline reads"):
        component_plugin(plugin, "text-encoder", "SomePipeline", "text_encoder")


def test_hidden_states_without_a_decoder_text_encoder_is_refused(sana, capsys):
    from mobius.cli import main

    _, hf, _ = sana
    args = ["build", "--model", str(hf), str(hf.parent / "refused"), "--quiet"]
    assert main([*args, "--skip-component", "text_encoder", "--hidden-states", "-2"]) == 1
    err = capsys.readouterr().err
    assert "--hidden-states applies to decoder text encoders" in err, err
    assert len(err.strip().splitlines()) == 1


def test_resolution_bins_are_diffusers():
    import torch
    from diffusers.image_processor import PixArtImageProcessor
    from diffusers.pipelines.pixart_alpha.pipeline_pixart_alpha import (
        ASPECT_RATIO_512_BIN,
        ASPECT_RATIO_1024_BIN,
    )
    from diffusers.pipelines.pixart_alpha.pipeline_pixart_sigma import ASPECT_RATIO_2048_BIN
    from diffusers.pipelines.sana.pipeline_sana import ASPECT_RATIO_4096_BIN

    from mobius_diffusion.pipelines.resolution_bins import (
        BINS_BY_SAMPLE_SIZE,
        binned_size,
        resize_and_crop,
    )

    theirs = {16: ASPECT_RATIO_512_BIN, 32: ASPECT_RATIO_1024_BIN}
    theirs.update({64: ASPECT_RATIO_2048_BIN, 128: ASPECT_RATIO_4096_BIN})
    for sample_size, table in theirs.items():
        ours = BINS_BY_SAMPLE_SIZE[sample_size]
        assert list(ours) == list(table)  # the order breaks ties
        assert all(tuple(map(int, table[k])) == ours[k] for k in table)
        for height, width in ((1000, 700), (512, 512), (300, 1900), (1, 4), (4000, 1000)):
            expected = PixArtImageProcessor.classify_height_width_bin(height, width, table)
            assert binned_size(height, width, sample_size) == expected
    with pytest.raises(ConfigError, match="not 8; turn it off"):
        binned_size(64, 64, 8)
    images = np.random.default_rng(0).standard_normal((1, 3, 24, 40)).astype(np.float32)
    for height, width in ((30, 37), (12, 25), (24, 40), (61, 17)):  # up, down, same, mixed
        expected = PixArtImageProcessor.resize_and_crop_tensor(
            torch.from_numpy(images), width, height
        )
        got = resize_and_crop(images, height, width)
        assert got.shape == tuple(expected.shape) == (1, 3, height, width)
        assert np.abs(got - expected.numpy()).max() <= 1e-5


def test_sana_bins_the_resolution_as_diffusers(sana, tmp_path):
    """A 512-pixel transformer (sample_size 16): 64 x 96 is made at 416 x 608 (the 0.68 bin),
    then resized and centre-cropped back, as diffusers' default. Measured ~2e-5: the DC-AE's
    linear attention over the larger image (416 x 608 unbinned differs by ~3e-5 too); the
    resize itself adds under 1e-6."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, _, out = sana
    package = tmp_path / "package"
    shutil.copytree(out, package)
    config_path = package / "transformer" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "sample_size": 16}))
    latents = np.random.default_rng(2).standard_normal((1, 4, 104, 152)).astype(np.float32)
    options = dict(
        num_inference_steps=1, guidance_scale=1.0, height=64, width=96, max_sequence_length=8
    )
    pipe.transformer.register_to_config(sample_size=16)
    try:
        with torch.no_grad():
            expected = pipe(
                PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
            ).images
    finally:
        pipe.transformer.register_to_config(sample_size=8)
    got = open_pipeline(package)(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, 64, 96, 3)
    diff = float(np.abs(got - expected).max())
    print("sana binned max abs diff", diff)
    assert diff <= 1e-3
    with pytest.raises(ConfigError, match="multiple of 32 on each side, not 48 x 96"):
        open_pipeline(package)(PROMPT, use_resolution_binning=False, **{**options, "height": 48})
