"""A tiny random SDXL pipeline with an IP-Adapter Full: built whole with ``mobius build
--ip-adapter FILE``, run by mobius's numpy runner and by diffusers (``load_ip_adapter`` of the
same file) from the same image prompt and latents, 2 Euler steps with CFG; the images agree
to 1e-3 on [0, 1] (measured ~2e-6).

A Full adapter projects every CLIP hidden state (the image encoder's
``penultimate_hidden_state``, transformers' ``hidden_states[-2]``), and the negative rows
are the encoding of a zero image, as diffusers' ``prepare_ip_adapter_image_embeds``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from ip_adapter_pipeline_cases import make_sdxl_ip_adapter_pipeline
from pipeline_cases import PROMPT
from test_pipeline_ip_adapter import _image

from mobius.testing import build_with_cli

OPTIONS = dict(num_inference_steps=2, guidance_scale=5.0, height=32, width=32)


@pytest.fixture(scope="module")
def sdxl_ip(tmp_path_factory):
    """(diffusers pipeline with the adapter loaded, built package directory)."""
    root = tmp_path_factory.mktemp("sdxl_ip")
    pipe, adapter = make_sdxl_ip_adapter_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx", "--ip-adapter", str(adapter))


def test_sdxl_ip_adapter_full_matches_diffusers(sdxl_ip):
    import torch

    from mobius_diffusion.pipeline import StableDiffusionXLIPAdapterRunner, open_pipeline

    pipe, out = sdxl_ip
    assert json.loads((out / "ip_adapter/config.json").read_text())["kind"] == "full"
    runner = open_pipeline(out)
    assert isinstance(runner, StableDiffusionXLIPAdapterRunner)
    image = _image()
    latents = np.random.default_rng(2).standard_normal((1, 4, 16, 16)).astype(np.float32)
    pipe.set_ip_adapter_scale(0.8)
    with torch.no_grad():
        expected = pipe(
            PROMPT,
            ip_adapter_image=image,
            latents=torch.from_numpy(latents),
            output_type="np",
            **OPTIONS,
        ).images
    got = runner(PROMPT, ip_adapter_image=image, ip_adapter_scale=0.8, latents=latents, **OPTIONS)
    assert got.shape == expected.shape == (1, 32, 32, 3)
    diff = float(np.abs(got - expected).max())
    print("max abs diff", diff)
    assert diff <= 1e-3
    plain = runner(PROMPT, ip_adapter_image=image, ip_adapter_scale=0.0, latents=latents, **OPTIONS)
    assert float(np.abs(plain - got).max()) > 1e-3, "the image prompt changes nothing"
