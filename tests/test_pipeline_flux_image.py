"""Tiny random Flux pipelines that start from an image (image-to-image, inpainting, Fill,
Kontext): built whole with ``mobius build``, run by mobius's numpy runners and by diffusers on
the same image, mask and noise, 2 denoising steps; the images agree to 1e-3.

Every parameter is perturbed. diffusers draws the VAE posterior samples and the initial
noise with ``randn_tensor``; the tests hand it mobius's draws in mobius's order
(``numpy.random.default_rng(seed)`` patched over ``randn_tensor``), so a different order of
draws in either library fails the test. The text-to-image components serve image-to-image,
inpainting and Kontext (each saved and built whole); Fill has its own transformer (48 input
channels).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT, make_flux_pipeline
from test_pipeline_img2img import compare, test_image, test_mask

from mobius.testing import build_with_cli

SEED = 5
HEIGHT, WIDTH = 32, 24  # latents 16 x 12, packed into 8 x 6 = 48 tokens
# strength 0.6 of 3 steps skips int(3 - 1.8) = 1 and runs 2
RUN = dict(num_inference_steps=3, guidance_scale=2.5, max_sequence_length=10)
SIZE = dict(height=HEIGHT, width=WIDTH)


@pytest.fixture
def same_draws(monkeypatch):
    """Make diffusers' ``randn_tensor`` draw what mobius draws for ``SEED``."""
    import diffusers.models.autoencoders.vae as vae
    import diffusers.pipelines.flux.pipeline_flux_fill as fill
    import diffusers.pipelines.flux.pipeline_flux_img2img as img2img
    import diffusers.pipelines.flux.pipeline_flux_inpaint as inpaint
    import diffusers.pipelines.flux.pipeline_flux_kontext as kontext
    import torch

    draws = np.random.default_rng(SEED)

    def randn_tensor(shape, **_):
        return torch.from_numpy(draws.standard_normal(tuple(shape), dtype=np.float32))

    for module in (vae, img2img, inpaint, fill, kontext):
        monkeypatch.setattr(module, "randn_tensor", randn_tensor)


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    """The tiny Flux text-to-image pipeline's components (guidance-distilled, as FLUX.1-dev)."""
    return make_flux_pipeline(tmp_path_factory.mktemp("flux-t2i") / "hf").components


def built(pipe_class, components: dict, root, **changes):
    """``pipe_class`` of ``components`` saved by diffusers and built whole by mobius:
    (the diffusers pipeline, the package directory)."""
    pipe = made(pipe_class, components, **changes)
    pipe.save_pretrained(root / "hf", safe_serialization=True)
    return pipe, build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def img2img(components, tmp_path_factory):
    """(``FluxImg2ImgPipeline``, its built package)."""
    from diffusers import FluxImg2ImgPipeline

    return built(FluxImg2ImgPipeline, components, tmp_path_factory.mktemp("flux-img2img"))


@pytest.fixture(scope="module")
def inpaint(components, tmp_path_factory):
    """(``FluxInpaintPipeline``, its built package)."""
    from diffusers import FluxInpaintPipeline

    return built(FluxInpaintPipeline, components, tmp_path_factory.mktemp("flux-inpaint"))


@pytest.fixture(scope="module")
def kontext(components, tmp_path_factory):
    """(``FluxKontextPipeline``, its built package)."""
    from diffusers import FluxKontextPipeline

    return built(FluxKontextPipeline, components, tmp_path_factory.mktemp("flux-kontext"))


@pytest.fixture(scope="module")
def fill(components, tmp_path_factory):
    """(``FluxFillPipeline`` with a Fill transformer: latents, masked image, 2 x 2 mask pixels
    per latent = 4*4 + 4*4 + 4*4 = 48 input channels, 16 out; its built package)."""
    from diffusers import FluxFillPipeline, FluxTransformer2DModel

    from mobius.testing import perturb_parameters

    config = {k: v for k, v in components["transformer"].config.items() if k[0] != "_"}
    config.update(in_channels=48, out_channels=16)  # "_use_default_values" would drop out_channels
    transformer = FluxTransformer2DModel.from_config(config)
    perturb_parameters(transformer, 21)
    root = tmp_path_factory.mktemp("flux-fill")
    return built(FluxFillPipeline, components, root, transformer=transformer.eval())


def made(pipe_class, components: dict, **changes):
    """``pipe_class`` of the components its constructor takes (Fill has no IP-Adapter ones)."""
    import inspect

    takes = inspect.signature(pipe_class.__init__).parameters
    return pipe_class(**{k: v for k, v in {**components, **changes}.items() if k in takes})


def relabelled(class_name: str, package, directory):
    """``package`` copied with ``class_name`` in ``model_index.json`` (its components
    unchanged: a Fill package with a text-to-image transformer)."""
    import shutil

    out = directory / "onnx"
    shutil.copytree(package, out)
    index = json.loads((out / "model_index.json").read_text())
    index["_class_name"] = class_name
    (out / "model_index.json").write_text(json.dumps(index))
    return out


@pytest.mark.parametrize(
    "fixture, class_name, channels",
    [
        ("img2img", "FluxImg2ImgPipeline", 16),
        ("inpaint", "FluxInpaintPipeline", 16),
        ("fill", "FluxFillPipeline", 48),
        ("kontext", "FluxKontextPipeline", 16),
    ],
)
def test_package_layout(request, fixture, class_name, channels):
    """Each pipeline built whole: the VAE's encoder too, its class kept, the transformer's
    input channels (Fill's 48)."""
    import onnx

    _, out = request.getfixturevalue(fixture)
    for graph in ("transformer/model", "vae/encoder/model", "vae/decoder/model"):
        assert (out / f"{graph}.onnx").is_file(), graph
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == class_name
    model = onnx.load(out / "transformer/model.onnx", load_external_data=False)
    hidden = next(i for i in model.graph.input if i.name == "hidden_states")
    assert hidden.type.tensor_type.shape.dim[2].dim_value == channels


def test_img2img_matches_diffusers(img2img, same_draws):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = img2img
    image = test_image(27, 35)  # resized to 24 x 32
    got = open_pipeline(out)(PROMPT, image, strength=0.6, seed=SEED, **SIZE, **RUN)
    with torch.no_grad():
        expected = pipe(PROMPT, image=image, strength=0.6, output_type="np", **SIZE, **RUN)
    compare(got, expected.images, "flux img2img")  # measured 3.0e-6


def test_inpaint_matches_diffusers(inpaint, same_draws):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = inpaint
    image, mask = test_image(WIDTH, HEIGHT, seed=1), test_mask(WIDTH, HEIGHT)
    got = open_pipeline(out)(PROMPT, image, mask, strength=0.6, seed=SEED, **SIZE, **RUN)
    with torch.no_grad():
        expected = pipe(PROMPT, image=image, mask_image=mask, strength=0.6, output_type="np",
                        **SIZE, **RUN).images  # fmt: skip
    compare(got, expected, "flux inpaint")  # measured 5.2e-6


def test_fill_matches_diffusers(fill, same_draws):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = fill
    image, mask = test_image(WIDTH, HEIGHT, seed=2), test_mask(WIDTH, HEIGHT)
    options = dict(RUN, num_inference_steps=2)  # strength 1: both steps from pure noise
    got = open_pipeline(out)(PROMPT, image, mask, seed=SEED, **SIZE, **options)
    with torch.no_grad():
        expected = pipe(PROMPT, image=image, mask_image=mask, output_type="np", **SIZE, **options)
    compare(got, expected.images, "flux fill")  # measured 2.1e-6


def test_kontext_matches_diffusers(kontext, same_draws):
    """The context image (20 x 28, its own size: no auto-resize) as tokens after the noise's."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = kontext
    image = test_image(21, 29, seed=3)  # rounded down to 20 x 28
    options = dict(RUN, num_inference_steps=2, max_area=HEIGHT * WIDTH, **SIZE)
    got = open_pipeline(out)(PROMPT, image, seed=SEED, auto_resize=False, **options)
    with torch.no_grad():
        expected = pipe(image, PROMPT, output_type="np", _auto_resize=False, **options).images
    compare(got, expected, "flux kontext")  # measured 3.2e-6


def test_kontext_sizes_as_diffusers(kontext):
    """The output keeps ``max_area`` at the asked aspect ratio; the context image goes to the
    nearest trained resolution (30 x 40 is 28 x 40 in whole tokens, ratio 0.7: 832 x 1248)."""
    from mobius_diffusion.pipelines.flux_image import FluxKontextRunner

    runner = FluxKontextRunner(kontext[1])
    assert runner.kontext_size(40, 20, 32 * 32) == (44, 20)  # round(32 * 2**0.5) = 45 -> 44
    assert runner.context_pixels(test_image(30, 40), True).shape == (1, 3, 1248, 832)
    assert runner.context_pixels(test_image(30, 41), False).shape == (1, 3, 40, 28)


def test_generate_cli_writes_the_image(img2img, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    test_image(WIDTH, HEIGHT).save(tmp_path / "in.png")
    args = ["generate", str(img2img[1]), PROMPT, "--steps", "2", "--seed", "3", "--strength",
            "0.9", "--height", "32", "--width", "24", "--image", str(tmp_path / "in.png")]  # fmt: skip
    assert main([*args, "--output", str(tmp_path / "out.png")]) == 0
    expected = open_pipeline(img2img[1])(PROMPT, tmp_path / "in.png", strength=0.9, seed=3,
                                         num_inference_steps=2, **SIZE)  # fmt: skip
    image = np.asarray(Image.open(tmp_path / "out.png"))
    assert np.array_equal(image, np.asarray(to_pil(expected)[0]))


@pytest.mark.parametrize(
    "case, args, message",
    [
        ("img2img", [], "starts from an image: give --image FILE"),
        ("img2img", ["--image", "{image}", "--strength", "0"], "leaves no step to run"),
        ("img2img", ["--image", "{image}", "--mask-image", "{image}"], "takes no --mask-image"),
        ("kontext", ["--image", "{image}", "--strength", "0.5"], "--strength does not apply"),
        ("fill", ["--image", "{image}"], "starts from an image: give --mask-image FILE"),
    ],
)
def test_refusals_are_one_line(request, tmp_path, capsys, case, args, message):
    from mobius.cli import main

    image = tmp_path / "in.png"
    test_image(WIDTH, HEIGHT).save(image)
    package = request.getfixturevalue(case)[1]
    args = [a.format(image=image) for a in args]
    code = main(["generate", str(package), PROMPT, "--steps", "2", *args, "--height", "32"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and "\n" not in err, err


def test_fill_refuses_a_text_to_image_transformer(img2img, tmp_path):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    out = relabelled("FluxFillPipeline", img2img[1], tmp_path)
    image, mask = test_image(WIDTH, HEIGHT), test_mask(WIDTH, HEIGHT)
    with pytest.raises(ConfigError, match="takes 48 input channels") as error:
        open_pipeline(out)(PROMPT, image, mask, seed=SEED, **SIZE, **RUN)
    assert "\n" not in str(error.value)
