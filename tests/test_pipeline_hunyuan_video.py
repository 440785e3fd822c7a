"""A tiny random HunyuanVideo pipeline: built whole with ``mobius build`` (its Llama text encoder
through mobius-text's text-encoder task with ``hidden_states[-3]``, CLIP's pooled output), run by
mobius's numpy runner and by diffusers from the same latents, 2 flow-matching steps; the frames
agree to 1e-3 on [0, 1] (measured figure at the comparison).

Every parameter is perturbed. 17 frames are 5 latent frames: more than one tile of diffusers'
default framewise VAE decoding (4 latent frames), so the overlapping tiles and their blend are
exercised. The prompt goes into diffusers' default template, whose first 95 tokens the tiny
tokenizer cuts as Llama 3's does (``crop_start``); it is shorter than ``max_sequence_length`` (the
mask matters), and a negative prompt runs true CFG beside the embedded guidance.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hunyuan_video_pipeline_cases import make_hunyuan_video_pipeline
from pipeline_cases import PROMPT

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 17, 16, 32  # latents [1, 4, 5, 4, 8]: 2 x 4 patches a frame
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("hunyuan-video")
    pipe = make_hunyuan_video_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_hunyuan_video_builds_whole_and_matches_diffusers(hunyuan):
    """Measured ~3.3e-6."""
    import torch

    from mobius_diffusion.pipeline import HunyuanVideoRunner, open_pipeline

    pipe, out = hunyuan
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "LlamaModel"
    assert built["text_encoder_2/model"] == "clip_text_model"
    assert built["transformer/model"] == "HunyuanVideoTransformer3DModel"
    assert built["vae/encoder/model"] == "AutoencoderKLHunyuanVideo"
    runner = open_pipeline(out)
    assert isinstance(runner, HunyuanVideoRunner)

    latents = np.random.default_rng(1).standard_normal((1, 4, 5, 4, 8)).astype(np.float32)
    options = dict(
        OPTIONS,
        guidance_scale=4.5,
        negative_prompt="a blue bicycle",
        true_cfg_scale=2.0,
        max_sequence_length=10,  # the prompt's 7 tokens (with <|eot_id|>) and 3 pads
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("hunyuan video max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_video(hunyuan, tmp_path, capsys):
    """``mobius generate`` writes the frames; sizes diffusers would round are refused."""
    from PIL import Image

    from mobius.cli import main

    _, out = hunyuan
    clip = tmp_path / "clip.webp"
    args = ["generate", str(out), PROMPT, "--steps", "1", "--seed", "3", "--frames", "5"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH)]
    assert main([*args, "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", 5, (WIDTH, HEIGHT))
    capsys.readouterr()
    for extra, message in (
        (["--frames", "6"], "a HunyuanVideo video has 4k+1 frames"),
        (["--width", "24"], "a HunyuanVideo video's height and width are multiples of 16"),
        (["--negative-prompt", "a cat"], "HunyuanVideo's true CFG takes a negative_prompt"),
    ):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (dict(true_cfg_scale=3.0), "true CFG takes a negative_prompt and true_cfg_scale > 1"),
        (dict(prompt_template={"template": "{}"}), "prompt_template crop_start"),
        (dict(prompt_template={"crop_start": 2}), "prompt_template has no 'template'"),
    ],
)
def test_runner_refuses_what_diffusers_would_skip_or_fail(hunyuan, change, named):
    from mobius_diffusion.pipeline import open_pipeline

    with pytest.raises(ConfigError, match=named):
        open_pipeline(hunyuan[1])(PROMPT, **OPTIONS, **change)
