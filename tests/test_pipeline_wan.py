"""A tiny random Wan 2.1 text-to-video pipeline: built whole with ``mobius build``, run by
mobius's numpy runner and by diffusers from the same latents, 2 UniPC flow-sigma steps with
CFG; the frames agree to 1e-3 on [0, 1] (measured 1.3e-6).

Every parameter is perturbed. The pipeline is saved as the hub holds
Wan-AI/Wan2.1-T2V-1.3B-Diffusers: a ``UMT5EncoderModel`` text encoder, a T5-style
tokenizer, ``WanTransformer3DModel``, ``AutoencoderKLWan`` with ``latents_mean``/``latents_std``
and the hub's UniPC scheduler config (flow sigmas, ``flow_shift`` 3). The prompt is
shorter than ``max_sequence_length``, so the states the pipeline zeroes past it matter.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pipeline_cases import PROMPT, _perturbed, tiny_word_tokenizer

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 5, 16, 32  # latents [1, 4, 2, 4, 8]: 2 x 4 patches a frame
MAX_SEQUENCE_LENGTH = 10  # the prompt's 7 tokens and 3 zeroed pads
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)

#: scheduler/scheduler_config.json of Wan-AI/Wan2.1-T2V-1.3B-Diffusers (its fields that differ
#: from UniPCMultistepScheduler's defaults).
HUB_SCHEDULER = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)


def make_wan_pipeline(directory: Path, boundary_ratio: float | None = None):
    """A tiny ``WanPipeline`` (UMT5 16 wide, a 2-layer transformer, a VAE of 4 latent
    channels that halves time twice and space twice) saved into ``directory``; with a
    ``boundary_ratio``, Wan 2.2 A14B's layout: a second expert, ``transformer_2``."""
    import torch
    from diffusers import (
        AutoencoderKLWan,
        UniPCMultistepScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(tokenizer),
            d_model=16,
            d_kv=8,
            d_ff=24,
            num_layers=2,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
            feed_forward_proj="gated-gelu",
        )
    )
    sizes = dict(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
    )
    transformer = WanTransformer3DModel(**sizes)
    experts = {}
    if boundary_ratio is not None:
        experts = dict(transformer_2=WanTransformer3DModel(**sizes), boundary_ratio=boundary_ratio)
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[True, True],
        latents_mean=[0.1, -0.2, 0.3, 0.05],
        latents_std=[1.5, 0.8, 2.0, 1.2],
    )
    second = [experts["transformer_2"]] if experts else []
    _perturbed(text_encoder, transformer, vae, *second)
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=UniPCMultistepScheduler(**HUB_SCHEDULER),
        transformer=transformer,
        **experts,
    )
    pipe.save_pretrained(directory)
    return pipe


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("wan")
    pipe = make_wan_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_wan_builds_whole_and_matches_diffusers(wan):
    import torch

    from mobius_diffusion.pipeline import WanRunner, open_pipeline

    pipe, out = wan
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "UMT5EncoderModel"
    assert built["transformer/model"] == "WanTransformer3DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, WanRunner)
    assert "last_hidden_state" in runner.outputs("text_encoder/model")

    latents = np.random.default_rng(1).standard_normal((1, 4, 2, 4, 8)).astype(np.float32)
    options = dict(
        OPTIONS, negative_prompt="a blue bicycle", max_sequence_length=MAX_SEQUENCE_LENGTH
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("wan max abs diff", diff)
    assert diff <= 1e-3


def test_wan22_two_experts_match_diffusers(tmp_path):
    """Wan 2.2 A14B's layout: 2 steps at t 999 and 750 about a boundary at 875, so each expert
    runs one, with its own guidance scale; measured ~1.6e-6."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe = make_wan_pipeline(tmp_path / "hf", boundary_ratio=0.875)
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    record = json.loads((out / "mobius.json").read_text())
    graphs = {g: m["model_type"] for m in record["models"] for g in m["graphs"]}
    assert graphs["transformer_2/model"] == graphs["transformer/model"] == "WanTransformer3DModel"
    latents = np.random.default_rng(1).standard_normal((1, 4, 2, 4, 8)).astype(np.float32)
    options = dict(OPTIONS, max_sequence_length=MAX_SEQUENCE_LENGTH, guidance_scale_2=2.0)
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    runner = open_pipeline(out)
    got = runner(PROMPT, latents=latents, **options)
    diff = float(np.abs(got - expected).max())
    print("wan 2.2 max abs diff", diff)
    assert diff <= 1e-3
    # the second expert's scale is read: another one changes the video
    other = runner(PROMPT, latents=latents, **{**options, "guidance_scale_2": 6.0})
    assert float(np.abs(other - got).max()) > 1e-3


def test_generate_cli_writes_the_video(wan, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = wan
    clip, frames = tmp_path / "clip.webp", tmp_path / "frames"
    frames.mkdir()
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main([*args, "--fps", "8", "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
        video.seek(1)
        video.load()
        assert video.info["duration"] == 125  # 8 frames a second
    assert main([*args, "--output", str(frames)]) == 0
    expected = open_pipeline(out)(PROMPT, seed=3, **OPTIONS)[0]
    written = sorted(frames.iterdir())
    assert [p.name for p in written] == [f"frame_{i:05d}.png" for i in range(FRAMES)]
    for path, frame in zip(written, to_pil(expected), strict=True):
        assert np.array_equal(np.asarray(Image.open(path)), np.asarray(frame))
    capsys.readouterr()

    for extra, message in (
        (["--frames", "4"], "a Wan video has 4k+1 frames (1, 5, 9...), not 4"),
        (["--width", "24"], "a Wan video's height and width are multiples of 16"),
        (["--output", str(tmp_path / "clip.mp4")], "a video is written as an animated .webp"),
        (["--fps", "0"], "--fps must be positive, not 0.0"),
    ):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1


def test_video_options_are_refused_on_an_image_package(tmp_path, capsys):
    from mobius.cli import main

    package = tmp_path / "sd"
    package.mkdir()
    (package / "model_index.json").write_text(
        json.dumps({"_class_name": "StableDiffusionPipeline"})
    )
    assert main(["generate", str(package), PROMPT, "--frames", "5", "--fps", "8"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mobius: error: --frames and --fps apply to video packages;"), err
    assert len(err.splitlines()) == 1
