"""Tiny random Stable Diffusion and SDXL pipelines that start from an image (image-to-image,
inpainting): built whole with ``mobius build``, run by mobius's numpy runners and by diffusers
on the same image, mask and noise, 2 denoising steps; the images agree to 1e-3.

Every parameter is perturbed. diffusers draws the VAE posterior samples and the initial
noise with ``randn_tensor``; the tests hand it mobius's draws, in mobius's order
(``numpy.random.default_rng(seed)``, patched over ``randn_tensor`` in the VAE's and the
pipelines' modules), so a different order of draws in either library fails the test.
One SD build serves image-to-image (three schedulers) and inpainting with the plain
4-channel UNet; an inpainting UNet (9 channels) has its own build, as does SDXL.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from pipeline_cases import PROMPT, make_sd_pipeline, make_sdxl_pipeline

from mobius.testing import build_with_cli

SEED = 7
SD_BETAS = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1)
SCHEDULERS = {
    "EulerDiscreteScheduler": SD_BETAS,
    "DDIMScheduler": dict(SD_BETAS, clip_sample=False, set_alpha_to_one=False),
    "DPMSolverMultistepScheduler": SD_BETAS,
}
# strength 0.7 of 3 steps runs the last int(3 * 0.7) = 2
STEPS, STRENGTH = 3, 0.7
RUN = dict(num_inference_steps=STEPS, guidance_scale=4.0)


def test_image(width: int, height: int, seed: int = 0):
    """A random RGB PIL image (its size off the VAE's multiples: the runners round or resize)."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def test_mask(width: int, height: int):
    """A mask with a white block and a gray ramp across 0.5 (binarized by both libraries)."""
    from PIL import Image

    mask = np.zeros((height, width, 3), dtype=np.uint8)
    mask[height // 4 : 3 * height // 4, width // 3 :] = 255
    mask[:4] = np.linspace(0, 255, width, dtype=np.uint8)[None, :, None]
    return Image.fromarray(mask)


test_image.__test__ = test_mask.__test__ = False  # helpers, not tests


@pytest.fixture
def same_draws(monkeypatch):
    """Make diffusers' ``randn_tensor`` draw what mobius draws for ``SEED``."""
    import diffusers.models.autoencoders.vae as vae
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img as sd_img2img
    import diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_inpaint as sd_inpaint
    import diffusers.pipelines.stable_diffusion_xl.pipeline_stable_diffusion_xl_img2img as xl
    import diffusers.pipelines.stable_diffusion_xl.pipeline_stable_diffusion_xl_inpaint as xl_inpaint
    import torch

    draws = np.random.default_rng(SEED)

    def randn_tensor(shape, **_):
        return torch.from_numpy(draws.standard_normal(tuple(shape), dtype=np.float32))

    for module in (vae, sd_img2img, sd_inpaint, xl, xl_inpaint):
        monkeypatch.setattr(module, "randn_tensor", randn_tensor)


def compare(got: np.ndarray, expected: np.ndarray, case: str) -> float:
    assert got.shape == expected.shape
    diff = float(np.abs(got - expected).max())
    print(case, "max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    return diff


def built(pipeline_class, components: dict, root, **config):
    """``pipeline_class`` of ``components`` saved by diffusers and built whole by mobius:
    (the diffusers pipeline, the package directory)."""
    pipe = pipeline_class(**components, **config)
    pipe.save_pretrained(root / "hf", safe_serialization=True)
    return pipe, build_with_cli(root / "hf", root / "onnx")


def new_unet(components: dict, seed: int, **changes):
    """The pipeline's UNet config with ``changes``, fresh weights, every parameter perturbed."""
    from diffusers import UNet2DConditionModel

    from mobius.testing import perturb_parameters

    unet = UNet2DConditionModel.from_config(components["unet"].config, **changes)
    perturb_parameters(unet, seed)
    return unet.eval()


@pytest.fixture(scope="module")
def sd(tmp_path_factory):
    """(``StableDiffusionImg2ImgPipeline``, its built package)."""
    from diffusers import StableDiffusionImg2ImgPipeline

    root = tmp_path_factory.mktemp("sd-img2img")
    components = make_sd_pipeline(root / "t2i").components
    return built(StableDiffusionImg2ImgPipeline, components, root, requires_safety_checker=False)


@pytest.fixture(scope="module")
def inpainting(tmp_path_factory):
    """(``StableDiffusionInpaintPipeline`` with a 9-channel UNet, its built package)."""
    from diffusers import StableDiffusionInpaintPipeline

    root = tmp_path_factory.mktemp("sd-inpaint")
    components = make_sd_pipeline(root / "t2i").components
    components["unet"] = new_unet(components, 11, in_channels=9)
    return built(StableDiffusionInpaintPipeline, components, root, requires_safety_checker=False)


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory):
    """(``StableDiffusionXLImg2ImgPipeline``, its built package)."""
    from diffusers import StableDiffusionXLImg2ImgPipeline

    root = tmp_path_factory.mktemp("sdxl-img2img")
    components = make_sdxl_pipeline(root / "t2i").components
    return built(StableDiffusionXLImg2ImgPipeline, components, root, add_watermarker=False)


@pytest.fixture(scope="module")
def sdxl_inpainting(tmp_path_factory):
    """(``StableDiffusionXLInpaintPipeline`` with a 9-channel UNet, its built package)."""
    from diffusers import StableDiffusionXLInpaintPipeline

    root = tmp_path_factory.mktemp("sdxl-inpaint")
    components = make_sdxl_pipeline(root / "t2i").components
    components["unet"] = new_unet(components, 13, in_channels=9)
    return built(StableDiffusionXLInpaintPipeline, components, root, add_watermarker=False)


@pytest.fixture(scope="module")
def refiner(tmp_path_factory):
    """(``StableDiffusionXLImg2ImgPipeline`` laid out as the SDXL refiner, its built package):
    no first text encoder, ``requires_aesthetics_score`` (5 size ids, the last a score)."""
    from diffusers import StableDiffusionXLImg2ImgPipeline

    root = tmp_path_factory.mktemp("sdxl-refiner")
    components = make_sdxl_pipeline(root / "t2i").components
    unet = new_unet(
        components,
        12,
        cross_attention_dim=16,  # text_encoder_2's states alone
        projection_class_embeddings_input_dim=8 + 5 * 4,  # pooled text, 5 ids
    )
    components.update(unet=unet, text_encoder=None, tokenizer=None)
    config = dict(requires_aesthetics_score=True, add_watermarker=False)
    return built(StableDiffusionXLImg2ImgPipeline, components, root, **config)


@pytest.mark.parametrize(
    "scheduler",
    [
        "DDIMScheduler",
        "DPMSolverMultistepScheduler",
        "EulerAncestralDiscreteScheduler",
        "EulerDiscreteScheduler",
        "HeunDiscreteScheduler",
        "LCMScheduler",
        "PNDMScheduler",
        "UniPCMultistepScheduler",
    ],
)
def test_add_noise_matches_diffusers(scheduler):
    """``add_noise`` at the begin index (image-to-image's start) and after a step (inpainting)."""
    import diffusers
    import torch

    from mobius_diffusion.schedulers import load_scheduler

    config = {"_class_name": scheduler, **SD_BETAS}
    ours, theirs = load_scheduler(config), getattr(diffusers, scheduler).from_config(config)
    ours.set_timesteps(10)
    theirs.set_timesteps(10)
    original, noise = np.random.default_rng(0).standard_normal((2, 1, 4, 4, 4), dtype=np.float32)
    begin = 4 * ours.order
    ours.set_begin_index(begin)
    if hasattr(theirs, "set_begin_index"):
        theirs.set_begin_index(begin)
    for t in ours.timesteps[begin : begin + 2]:
        got = ours.add_noise(original, noise, t)
        expected = theirs.add_noise(
            torch.from_numpy(original), torch.from_numpy(noise), torch.tensor([t])
        ).numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        if hasattr(theirs, "set_begin_index"):  # one step on: the index moves with it
            ours._init_step_index(t)
            theirs._init_step_index(torch.tensor(t))
            ours._step_index += 1
            theirs._step_index += 1


@pytest.mark.parametrize(
    "fixture, class_name, unet_channels",
    [
        ("sd", "StableDiffusionImg2ImgPipeline", 4),
        ("inpainting", "StableDiffusionInpaintPipeline", 9),
        ("sdxl", "StableDiffusionXLImg2ImgPipeline", 4),
        ("sdxl_inpainting", "StableDiffusionXLInpaintPipeline", 9),
    ],
)
def test_package_layout(request, fixture, class_name, unet_channels):
    """Each pipeline built whole: the VAE's encoder too, its class kept, the UNet's channels."""
    import onnx

    _, out = request.getfixturevalue(fixture)
    for graph in ("unet/model", "vae/encoder/model", "vae/decoder/model", "text_encoder/model"):
        assert (out / f"{graph}.onnx").is_file(), graph
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == class_name
    unet = onnx.load(out / "unet/model.onnx", load_external_data=False)
    sample = next(i for i in unet.graph.input if i.name == "sample")
    assert sample.type.tensor_type.shape.dim[1].dim_value == unet_channels


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_img2img_matches_diffusers(sd, scheduler, same_draws):
    import diffusers
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = sd
    config = {"_class_name": scheduler, **SCHEDULERS[scheduler]}
    pipe.scheduler = getattr(diffusers, scheduler).from_config(config)
    image = test_image(33, 37)  # used at 32 x 36: multiples of the VAE's factor 2
    runner = open_pipeline(out)
    runner.scheduler_config = config
    got = runner(PROMPT, image, strength=STRENGTH, seed=SEED, **RUN)
    with torch.no_grad():
        expected = pipe(PROMPT, image, strength=STRENGTH, output_type="np", **RUN).images
    assert got.shape == (1, 36, 32, 3)
    # measured 1.4e-6 (Euler), 1.9e-6 (DDIM), 1.2e-6 (DPM-Solver++)
    compare(got, expected, scheduler)


def test_img2img_batch_matches_diffusers(sd, same_draws):
    """Two prompts, one image: its latents repeated, each row its own initial noise."""
    import diffusers
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = sd
    config = {"_class_name": "EulerDiscreteScheduler", **SD_BETAS}
    pipe.scheduler = diffusers.EulerDiscreteScheduler.from_config(config)
    prompts, image = [PROMPT, "a blue bicycle"], test_image(32, 32, seed=3)
    options = dict(strength=STRENGTH, negative_prompt=["the moon", ""], **RUN)
    runner = open_pipeline(out)
    runner.scheduler_config = config
    got = runner(prompts, image, seed=SEED, **options)
    with torch.no_grad():
        expected = pipe(prompts, image, output_type="np", **options).images
    compare(got, expected, "batch of two")  # measured 2.2e-6
    assert float(np.abs(got[0] - got[1]).max()) > 1e-3


@pytest.mark.parametrize("strength", [1.0, STRENGTH])
def test_inpainting_unet_matches_diffusers(inpainting, strength, same_draws):
    """The 9-channel UNet: mask and masked-image latents beside the latents."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = inpainting
    image, mask = test_image(40, 36), test_mask(40, 36)  # resized to 32 x 32
    options = dict(RUN, height=32, width=32, strength=strength)
    if strength == 1.0:  # all steps run: 2 of them
        options["num_inference_steps"] = 2
    got = open_pipeline(out)(PROMPT, image, mask, seed=SEED, **options)
    with torch.no_grad():
        expected = pipe(PROMPT, image, mask, output_type="np", **options).images
    compare(got, expected, f"strength {strength}")  # measured 1.2e-6, 1.4e-6


def test_text_to_image_unet_inpaints(sd, same_draws):
    """A 4-channel UNet inpaints by putting back the noised image outside the mask each step
    (the SD package's components, run by the inpainting runner and pipeline)."""
    import torch
    from diffusers import StableDiffusionInpaintPipeline

    from mobius_diffusion.pipelines.sd_img2img import StableDiffusionInpaintRunner

    pipe, out = sd
    pipe = StableDiffusionInpaintPipeline(**pipe.components, requires_safety_checker=False)
    pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config)  # fresh: no begin index
    image, mask = test_image(32, 32, seed=1), test_mask(32, 32)
    options = dict(height=32, width=32, strength=STRENGTH, **RUN)
    got = StableDiffusionInpaintRunner(out)(PROMPT, image, mask, seed=SEED, **options)
    with torch.no_grad():
        expected = pipe(PROMPT, image, mask, output_type="np", **options).images
    compare(got, expected, "4-channel UNet")  # measured 2.0e-6
    kept = np.asarray(mask)[:, :, 0] < 128
    assert float(np.abs(got[0] - expected[0])[kept].max()) <= 1e-3


def test_sdxl_img2img_matches_diffusers(sdxl, same_draws):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = sdxl
    image = test_image(32, 28)
    options = dict(
        strength=STRENGTH, negative_prompt="the moon", negative_original_size=(40, 40), **RUN
    )
    got = open_pipeline(out)(PROMPT, image, seed=SEED, **options)
    with torch.no_grad():
        expected = pipe(PROMPT, image=image, output_type="np", **options).images
    compare(got, expected, "sdxl")  # measured 1.5e-6


def test_sdxl_refiner_is_refused_at_run(refiner):
    """The refiner's UNet takes 5 size ids (the last an aesthetic score); mobius's UNet
    build fixes 6, so the runner refuses it, naming why, instead of feeding a wrong split."""
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    with pytest.raises(ConfigError, match="requires_aesthetics_score") as error:
        open_pipeline(refiner[1])(PROMPT, test_image(32, 32), seed=SEED, **RUN)
    assert "\n" not in str(error.value)


def test_sdxl_inpainting_matches_diffusers(sdxl_inpainting, same_draws):
    """SDXL's inpainting UNet (9 channels) at the default strength (0.9999: the image noised)."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = sdxl_inpainting
    image, mask = test_image(32, 32, seed=2), test_mask(32, 32)
    options = dict(height=32, width=32, **RUN)
    got = open_pipeline(out)(PROMPT, image, mask, seed=SEED, **options)
    with torch.no_grad():
        expected = pipe(PROMPT, image=image, mask_image=mask, output_type="np", **options).images
    compare(got, expected, "sdxl inpainting")  # measured 1.6e-6


def test_generate_cli_writes_the_image(sd, inpainting, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    test_image(32, 32).save(tmp_path / "in.png")
    test_mask(32, 32).save(tmp_path / "mask.png")
    common = ["--steps", "3", "--seed", "3", "--image", str(tmp_path / "in.png")]
    args = ["generate", str(sd[1]), PROMPT, *common, "--strength", "0.7"]
    assert main([*args, "--output", str(tmp_path / "out.png")]) == 0
    expected = to_pil(open_pipeline(sd[1])(PROMPT, tmp_path / "in.png", strength=0.7,
                                           num_inference_steps=3, seed=3))[0]  # fmt: skip
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out.png")), np.asarray(expected))
    args = ["generate", str(inpainting[1]), PROMPT, *common, "--mask-image"]
    assert main([*args, str(tmp_path / "mask.png"), "--output", str(tmp_path / "fill.png")]) == 0
    assert Image.open(tmp_path / "fill.png").size == (16, 16)  # the UNet's sample_size


@pytest.fixture(scope="module")
def text_to_image_package(sd, tmp_path_factory):
    """The SD package relabelled a text-to-image pipeline (the same components)."""
    out = tmp_path_factory.mktemp("t2i") / "onnx"
    shutil.copytree(sd[1], out)
    index = json.loads((out / "model_index.json").read_text())
    index["_class_name"] = "StableDiffusionPipeline"
    (out / "model_index.json").write_text(json.dumps(index))
    return out


@pytest.mark.parametrize(
    "case, args, message",
    [
        ("img2img", [], "starts from an image: give --image FILE"),
        ("img2img", ["--image", "{missing}"], "no such file"),
        ("img2img", ["--image", "{not_image}"], "is not a readable image"),
        ("img2img", ["--image", "{image}", "--height", "32"], "--height/--width do not apply"),
        ("img2img", ["--image", "{image}", "--strength", "0.1"], "leaves no step to run"),
        ("img2img", ["--image", "{image}", "--mask-image", "{image}"], "takes no --mask-image"),
        ("t2i", ["--mask-image", "{image}"], "takes no --mask-image (inpainting packages do)"),
        ("t2i", ["--image", "{image}"], "takes no --image (image-to-image and inpainting"),
        ("t2i", ["--strength", "0.5"], "--strength is for packages that start from an image"),
    ],
)
def test_refusals_are_one_line(sd, text_to_image_package, tmp_path, capsys, case, args, message):
    from mobius.cli import main

    paths = {"missing": tmp_path / "none.png", "not_image": tmp_path / "x.png"}
    paths["image"] = tmp_path / "in.png"
    paths["not_image"].write_text("not a PNG")
    test_image(32, 32).save(paths["image"])
    package = sd[1] if case == "img2img" else text_to_image_package
    args = [a.format(**paths) for a in args]
    code = main(["generate", str(package), PROMPT, "--steps", "3", *args])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and "\n" not in err, err
