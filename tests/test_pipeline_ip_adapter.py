"""A tiny random Stable Diffusion pipeline with an IP-Adapter: built whole with ``mobius build
--ip-adapter FILE``, run by mobius's numpy runner and by diffusers (``load_ip_adapter`` of the
same file) from the same image prompt and latents, 2 Euler steps with CFG; the images agree
to 1e-3 on [0, 1] (measured ~1.7e-6).

The build folds the adapter's ``ip_adapter.*`` tensors into the UNet's image cross-attention
and builds its ``image_proj.*`` as ``ip_adapter/model.onnx``; the image goes through the
pipeline's CLIP ``image_encoder`` (``image_embeds``; the negative rows zeros, as diffusers).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from ip_adapter_pipeline_cases import CLIP_SIZE, make_sd_ip_adapter_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

HEIGHT = WIDTH = 32  # latents 16 x 16
OPTIONS = dict(num_inference_steps=2, guidance_scale=4.0, height=HEIGHT, width=WIDTH)


def _image(seed: int = 5):
    """A 24 x 16 picture: its shortest edge the CLIP tower's, so only centre-cropped."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (CLIP_SIZE, 24, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def sd_ip(tmp_path_factory):
    """(diffusers pipeline with the adapter loaded, built package directory)."""
    root = tmp_path_factory.mktemp("sd_ip")
    pipe, adapter = make_sd_ip_adapter_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx", "--ip-adapter", str(adapter))


def test_ip_adapter_builds_whole_and_matches_diffusers(sd_ip):
    import torch

    from mobius_diffusion.pipeline import StableDiffusionIPAdapterRunner, open_pipeline

    pipe, out = sd_ip
    record = json.loads((out / "mobius.json").read_text())
    built = {graph: m["model_type"] for m in record["models"] for graph in m["graphs"]}
    assert built["ip_adapter/model"] == "IPAdapterImageProjection"
    assert built["image_encoder/model"] == "clip_vision_model"
    assert json.loads((out / "ip_adapter/config.json").read_text())["kind"] == "ip-adapter"
    runner = open_pipeline(out)
    assert isinstance(runner, StableDiffusionIPAdapterRunner)

    image = _image()
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 16)).astype(np.float32)
    pipe.set_ip_adapter_scale(0.6)
    with torch.no_grad():
        expected = pipe(
            PROMPT,
            ip_adapter_image=image,
            latents=torch.from_numpy(latents),
            output_type="np",
            **OPTIONS,
        ).images
    got = runner(PROMPT, ip_adapter_image=image, ip_adapter_scale=0.6, latents=latents, **OPTIONS)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    diff = float(np.abs(got - expected).max())
    print("max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    other = runner(
        PROMPT, ip_adapter_image=_image(6), ip_adapter_scale=0.6, latents=latents, **OPTIONS
    )
    assert float(np.abs(other - got).max()) > 1e-3, "the image prompt changes nothing"


def test_generate_cli_writes_the_image(sd_ip, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = sd_ip
    prompt_image, written = tmp_path / "prompt.png", tmp_path / "image.png"
    _image().save(prompt_image)
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(written)]
    args += ["--height", "32", "--width", "32", "--ip-adapter-image", str(prompt_image)]
    assert main([*args, "--ip-adapter-scale", "0.5"]) == 0
    options = dict(num_inference_steps=2, seed=3, height=32, width=32, ip_adapter_scale=0.5)
    expected = to_pil(open_pipeline(out)(PROMPT, ip_adapter_image=prompt_image, **options))[0]
    assert np.array_equal(np.asarray(Image.open(written)), np.asarray(expected))


def test_the_image_prompt_is_asked_for(sd_ip, capsys):
    from mobius.cli import main

    assert main(["generate", str(sd_ip[1]), PROMPT, "--steps", "1"]) == 1
    assert "give --ip-adapter-image FILE" in capsys.readouterr().err
