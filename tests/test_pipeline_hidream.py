"""A tiny random HiDream-I1 pipeline: built whole with ``mobius build`` (its Llama text encoder
through mobius-text's text-encoder task with every layer's states), run by mobius's numpy runner
and by diffusers from the same latents, 2 steps with CFG; the images agree to 1e-3 (measured
figures at each comparison).

Every parameter is perturbed: two CLIP encoders with projections, T5, Llama 3 (prompts
padded with its end token, masked), the mixture-of-experts transformer, a VAE with a shift
factor. The image asked for is resized as diffusers resizes it (32 x 128 to 64 x 256: a
non-square grid, padded to the transformer's ``max_seq``). HiDream-I1 Full's UniPC
scheduler, and the same build with flow matching (Dev and Fast's scheduler; here with a
dynamic shift, whose ``mu`` the pipeline takes from the transformer's ``max_seq``).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hidream_pipeline_cases import make_hidream_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 32, 128  # resized to 64 x 256 (the area of 128 x 128): latents 64 x 256
OPTIONS = dict(
    num_inference_steps=2,
    guidance_scale=3.0,
    height=HEIGHT,
    width=WIDTH,
    negative_prompt="a blue cat",
    max_sequence_length=8,
)


@pytest.fixture(scope="module")
def hidream(tmp_path_factory):
    """(diffusers pipeline, built package directory, the same latents for both)."""
    root = tmp_path_factory.mktemp("hidream")
    pipe = make_hidream_pipeline(root / "hf")
    out = build_with_cli(root / "hf", root / "onnx")
    latents = np.random.default_rng(1).standard_normal((1, 4, 64, 256)).astype(np.float32)
    return pipe, out, latents


def _diffusers_image(pipe, latents):
    import torch

    with torch.no_grad():
        return pipe(PROMPT, latents=torch.from_numpy(latents), output_type="np", **OPTIONS).images


def _compare(name, got, expected):
    assert got.shape == expected.shape == (1, 2 * HEIGHT, 2 * WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print(name, "max abs diff", diff)
    assert diff <= 1e-3


def test_hidream_builds_whole_and_matches_diffusers(hidream):
    """Measured ~1.1e-6."""
    from mobius_diffusion.pipeline import HiDreamImageRunner, open_pipeline

    pipe, out, latents = hidream
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder_4/model"] == "LlamaModel"
    assert built["transformer/model"] == "HiDreamImageTransformer2DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, HiDreamImageRunner)
    _compare("hidream", runner(PROMPT, latents=latents, **OPTIONS), _diffusers_image(pipe, latents))


def test_hidream_flow_matching_matches_diffusers(hidream, tmp_path):
    """Measured ~1.2e-6."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HiDreamImagePipeline

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out, latents = hidream
    package = tmp_path / "flow"
    shutil.copytree(out, package)
    # the pipeline's mu ignores the config's shift line: these values would change it
    scheduler = {
        "_class_name": "FlowMatchEulerDiscreteScheduler",
        "use_dynamic_shifting": True,
        "base_shift": 0.3,
        "max_shift": 2.0,
    }
    (package / "scheduler" / "scheduler_config.json").write_text(json.dumps(scheduler))
    parts = dict(pipe.components, scheduler=FlowMatchEulerDiscreteScheduler.from_config(scheduler))
    expected = _diffusers_image(HiDreamImagePipeline(**parts), latents)
    _compare(
        "hidream flow matching",
        open_pipeline(package)(PROMPT, latents=latents, **OPTIONS),
        expected,
    )


def test_generate_cli_writes_the_hidream_image(hidream, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out, _ = hidream
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main(args) == 0  # the default size: 128 x 128
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
    # 48 x 128 is resized to 78 x 208: latents that are not whole patches of 8
    assert main([*args, "--height", "48", "--width", "128"]) == 1
    err = capsys.readouterr().err
    assert "78 x 208 latents: not whole patches of 8" in err, err
    assert len(err.strip().splitlines()) == 1


def test_hidream_refusals_name_the_cause(hidream, tmp_path):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    _, out, _ = hidream
    with pytest.raises(ConfigError, match="padded to 200 tokens .*text_encoder takes 128"):
        open_pipeline(out)(PROMPT, num_inference_steps=1, max_sequence_length=200)
    package = tmp_path / "package"
    shutil.copytree(out, package)
    # a Llama built without every layer's states: here, a config that says more layers
    config_path = package / "text_encoder_4" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "num_hidden_layers": 5}))
    with pytest.raises(ConfigError, match=r"no output hidden_states.4 \(HiDream reads every"):
        open_pipeline(package)(PROMPT, num_inference_steps=1, max_sequence_length=8)
    scheduler = {"_class_name": "EulerDiscreteScheduler"}
    (package / "scheduler" / "scheduler_config.json").write_text(json.dumps(scheduler))
    with pytest.raises(ConfigError, match="not EulerDiscreteScheduler"):
        open_pipeline(package)
