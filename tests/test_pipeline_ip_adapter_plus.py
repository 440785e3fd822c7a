"""Tiny random SD / SDXL pipelines with an IP-Adapter Plus, FaceID or FaceID Plus (v1 and v2's
shortcut): built whole with ``mobius build --ip-adapter FILE`` (the file in the original
layout), run by mobius's numpy runner and by diffusers (``load_ip_adapter`` of the same file)
from the same image prompt or face embedding and latents, 2 Euler steps with CFG; the images
agree to 1e-3 on [0, 1] (measured 1.1e-6 to 1.7e-6, each test prints its figure).

Plus and FaceID Plus read CLIP's penultimate hidden states of the image (a zero image for
the negative rows); FaceID and FaceID Plus read a face embedding the caller gives, as
diffusers' ``ip_adapter_image_embeds`` ([2, num_images, 20] here: negative row first).
diffusers' FaceID Plus takes the image's states on its projection layer (``clip_embeds``,
with ``shortcut`` and ``shortcut_scale`` for v2), as its docs show. The FaceID adapters carry
a LoRA of every attention, as their checkpoints do: mobius merges it into the UNet, diffusers
applies it through peft (without the merge the images differ by 0.5).
"""

from __future__ import annotations

import numpy as np
import pytest
from ip_adapter_pipeline_cases import (
    FACE,
    make_sd_ip_adapter_pipeline,
    make_sdxl_ip_adapter_pipeline,
)
from pipeline_cases import PROMPT
from test_pipeline_ip_adapter import _image

from mobius.cli import main
from mobius.testing import build_with_cli

OPTIONS = dict(num_inference_steps=2, guidance_scale=4.0, height=32, width=32)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(kind, xl=False)``: (diffusers pipeline with the adapter loaded, package), made
    once per module; FaceID's package leaves the image encoder out, which it does not read."""
    cache = {}

    def make(kind: str, xl: bool = False):
        if (kind, xl) not in cache:
            root = tmp_path_factory.mktemp(f"{kind}_xl" if xl else kind)
            maker = make_sdxl_ip_adapter_pipeline if xl else make_sd_ip_adapter_pipeline
            pipe, adapter = maker(root / "hf", kind)
            extra = ("--skip-component", "image_encoder") if kind == "faceid" else ()
            out = build_with_cli(root / "hf", root / "onnx", "--ip-adapter", str(adapter), *extra)
            cache[kind, xl] = pipe, out
        return cache[kind, xl]

    return make


def _faces(images: int = 1, seed: int = 4) -> np.ndarray:
    """A face embedding for each image, negative rows (random, not zeros: their order shows)
    first: ``[2, images, FACE]``."""
    return np.random.default_rng(seed).standard_normal((2, images, FACE)).astype(np.float32)


def _compare(pipe, runner, scale: float, latents_seed: int, **prompt) -> np.ndarray:
    """The runner's image beside diffusers' from the same ``prompt`` options (diffusers'
    ``ip_adapter_image_embeds`` a list of torch tensors); returns the runner's."""
    import torch

    latents = np.random.default_rng(latents_seed).standard_normal((1, 4, 16, 16))
    latents = latents.astype(np.float32)
    theirs = dict(prompt)
    if "ip_adapter_image_embeds" in theirs:
        theirs["ip_adapter_image_embeds"] = [torch.from_numpy(theirs["ip_adapter_image_embeds"])]
    if "ip_adapter_image_embeds" in theirs:  # FaceID Plus: the image is on diffusers' layer,
        theirs.pop("ip_adapter_image", None)  # as are the shortcut and its scale
    theirs.pop("ip_adapter_shortcut_scale", None)
    pipe.set_ip_adapter_scale(scale)
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **theirs, **OPTIONS
        ).images
    got = runner(PROMPT, ip_adapter_scale=scale, latents=latents, **prompt, **OPTIONS)
    assert got.shape == expected.shape == (1, 32, 32, 3)
    diff = float(np.abs(got - expected).max())
    print("max abs diff", diff)
    assert diff <= 1e-3
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    return got


@pytest.mark.parametrize("xl", [False, True], ids=["sd15", "sdxl"])
def test_plus_matches_diffusers(built, xl):
    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = built("plus", xl)
    runner = open_pipeline(out)
    got = _compare(pipe, runner, 0.7, 1, ip_adapter_image=_image())
    other = runner(PROMPT, ip_adapter_image=_image(6), seed=0, **OPTIONS)
    again = runner(PROMPT, ip_adapter_image=_image(), seed=0, **OPTIONS)
    assert float(np.abs(other - again).max()) > 1e-3, "the image prompt changes nothing"
    assert got.shape == other.shape


def test_plus_takes_precomputed_states(built):
    """``ip_adapter_image_embeds`` as diffusers' ``prepare_ip_adapter_image_embeds`` gives them
    (CLIP's penultimate states, [2, 1, image_tokens, width], the zero image's first)."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = built("plus")
    with torch.no_grad():
        states = pipe.prepare_ip_adapter_image_embeds([_image()], None, "cpu", 1, True)[0]
    assert tuple(states.shape) == (2, 1, 5, 16)
    _compare(pipe, open_pipeline(out), 0.7, 4, ip_adapter_image_embeds=states.numpy())


@pytest.mark.parametrize("images", [1, 2])
def test_faceid_matches_diffusers(built, images):
    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = built("faceid")
    assert not (out / "image_encoder").exists()
    runner = open_pipeline(out)
    got = _compare(pipe, runner, 0.8, 2, ip_adapter_image_embeds=_faces(images))
    other = runner(PROMPT, ip_adapter_image_embeds=_faces(images, 5), seed=0, **OPTIONS)
    again = runner(PROMPT, ip_adapter_image_embeds=_faces(images), seed=0, **OPTIONS)
    assert float(np.abs(other - again).max()) > 1e-3, "the face changes nothing"
    assert got.shape == other.shape


@pytest.mark.parametrize("shortcut", [None, 0.9], ids=["v1", "v2"])
def test_faceid_plus_matches_diffusers(built, shortcut):
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = built("faceid-plus")
    runner = open_pipeline(out)
    image = _image()
    layer = pipe.unet.encoder_hid_proj.image_projection_layers[0]
    with torch.no_grad():  # diffusers' docs: the image's hidden states, set on the layer
        layer.clip_embeds = pipe.prepare_ip_adapter_image_embeds([image], None, "cpu", 1, True)[0]
    layer.shortcut, layer.shortcut_scale = shortcut is not None, shortcut or 1.0
    prompt = dict(ip_adapter_image=image, ip_adapter_image_embeds=_faces())
    got = _compare(pipe, runner, 0.8, 3, ip_adapter_shortcut_scale=shortcut, **prompt)
    if shortcut is not None:
        v1 = runner(PROMPT, ip_adapter_scale=0.8, seed=1, **prompt, **OPTIONS)
        v2 = runner(
            PROMPT,
            ip_adapter_scale=0.8,
            seed=1,
            **prompt,
            **OPTIONS,
            ip_adapter_shortcut_scale=shortcut,
        )
        assert float(np.abs(v2 - v1).max()) > 1e-3, "the shortcut changes nothing"
        assert got.shape == v1.shape


def test_generate_cli_reads_the_face_embedding(built, tmp_path):
    from PIL import Image

    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = built("faceid")
    faces, written = tmp_path / "faces.npy", tmp_path / "image.png"
    np.save(faces, _faces())
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(written)]
    assert (
        main([*args, "--height", "32", "--width", "32", "--ip-adapter-image-embeds", str(faces)])
        == 0
    )
    options = dict(num_inference_steps=2, seed=3, height=32, width=32)
    expected = to_pil(open_pipeline(out)(PROMPT, ip_adapter_image_embeds=_faces(), **options))[0]
    assert np.array_equal(np.asarray(Image.open(written)), np.asarray(expected))


@pytest.mark.parametrize(
    ("kind", "extra", "message"),
    [
        (
            "faceid",
            ["--guidance-scale", "1"],
            "expected float [1, num_images, 20], got float32 [2, 1, 20]",
        ),
        ("faceid", ["--ip-adapter-image", "IMAGE"], "FaceID reads a face embedding, no image"),
        ("faceid", ["--ip-adapter-shortcut-scale", "1"], "is FaceID Plus v2's, not this adapter's"),
        ("faceid-plus", [], "give both ip_adapter_image_embeds and ip_adapter_image"),
    ],
)
def test_image_prompts_the_adapter_cannot_read_are_refused(
    built, tmp_path, capsys, kind, extra, message
):
    _, out = built(kind)
    faces, image = tmp_path / "faces.npy", tmp_path / "image.png"
    np.save(faces, _faces())
    _image().save(image)
    extra = [str(image) if arg == "IMAGE" else arg for arg in extra]
    args = ["generate", str(out), PROMPT, "--steps", "1", "--ip-adapter-image-embeds", str(faces)]
    assert main([*args, "--output", str(tmp_path / "x.png"), *extra]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_an_unreadable_embedding_file_is_refused(built, tmp_path, capsys):
    _, out = built("faceid")
    bad = tmp_path / "faces.npy"
    bad.write_text("not an array")
    assert main(["generate", str(out), PROMPT, "--ip-adapter-image-embeds", str(bad)]) == 1
    assert "not a .npy array" in capsys.readouterr().err
