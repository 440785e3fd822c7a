"""IP-Adapter image projection: a single-file checkpoint built with the CLI against diffusers.

The checkpoint is written in the original IP-Adapter layout (``image_proj.*`` and
``ip_adapter.*`` in one safetensors file, no config); the reference is the
projection diffusers makes of it with its own converter.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from diffusers import UNet2DConditionModel
from safetensors.numpy import save_file

from mobius.cli import main

IMAGE_EMBED_DIM, CROSS_DIM = 24, 16


def ip_adapter_tensors(kind: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random tensors of an IP-Adapter checkpoint (norm weights near 1, biases non-zero)."""
    rng = np.random.default_rng(seed)
    if kind == "ip-adapter":
        shapes = {
            "image_proj.proj.weight": (4 * CROSS_DIM, IMAGE_EMBED_DIM),
            "image_proj.proj.bias": (4 * CROSS_DIM,),
        }
    else:
        shapes = {
            "image_proj.proj.0.weight": (IMAGE_EMBED_DIM, IMAGE_EMBED_DIM),
            "image_proj.proj.0.bias": (IMAGE_EMBED_DIM,),
            "image_proj.proj.2.weight": (CROSS_DIM, IMAGE_EMBED_DIM),
            "image_proj.proj.2.bias": (CROSS_DIM,),
        }
    shapes |= {"image_proj.norm.weight": (CROSS_DIM,), "image_proj.norm.bias": (CROSS_DIM,)}
    if kind == "full":
        shapes = {k.replace("image_proj.norm", "image_proj.proj.3"): v for k, v in shapes.items()}
    # The UNet half: key/value projections of one image cross-attention layer.
    shapes |= {
        "ip_adapter.1.to_k_ip.weight": (8, CROSS_DIM),
        "ip_adapter.1.to_v_ip.weight": (8, CROSS_DIM),
    }
    tensors = {}
    for name, shape in shapes.items():
        base = 1.0 if name.endswith(("norm.weight", "proj.3.weight")) else 0.0
        tensors[name] = (base + 0.3 * rng.standard_normal(shape)).astype(np.float32)
    return tensors


def diffusers_projection(tensors: dict[str, np.ndarray]):
    """The image projection diffusers builds from the checkpoint's ``image_proj`` tensors."""
    state = {
        k.removeprefix("image_proj."): torch.from_numpy(v)
        for k, v in tensors.items()
        if k.startswith("image_proj.")
    }
    unet = UNet2DConditionModel.__new__(UNet2DConditionModel)  # only its converter is used
    return unet._convert_ip_adapter_image_proj_to_diffusers(state, low_cpu_mem_usage=False).eval()


def test_lone_safetensors_file_nobody_recognises(tmp_path, capsys):
    checkpoint = tmp_path / "weights.safetensors"
    save_file({"encoder.weight": np.zeros((2, 2), np.float32)}, checkpoint)
    assert main(["build", "--model", str(checkpoint), str(tmp_path / "onnx"), "--quiet"]) == 1
    assert "no installed mobius package recognises its tensors" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


def _session(tensors: dict[str, np.ndarray], directory):
    """The CLI's build of ``tensors`` saved as one file, opened in ONNX Runtime."""
    save_file(tensors, directory / "adapter.safetensors")
    args = ["build", "--model", str(directory / "adapter.safetensors"), str(directory / "onnx")]
    assert main([*args, "--quiet"]) == 0
    model = str(directory / "onnx/model.onnx")
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("kind", ["ip-adapter", "full", "plus", "faceid", "faceid-plus"])
def test_ip_adapter_parity(kind, tmp_path):
    """Each projection against diffusers' (FaceID Plus: v1, and v2's shortcut); measured
    max abs diffs 1e-6 to 4e-6 (outputs of order 1)."""
    from mobius_diffusion.testing._ip_adapter import random_image_proj

    if kind in ("ip-adapter", "full"):
        tensors = ip_adapter_tensors(kind)
    else:
        tensors = random_image_proj(kind, IMAGE_EMBED_DIM, CROSS_DIM)
    session = _session(tensors, tmp_path)
    rng = np.random.default_rng(1)
    clip = rng.standard_normal((2, 5, IMAGE_EMBED_DIM)).astype(np.float32)
    face = rng.standard_normal((2, 20 if kind == "faceid-plus" else IMAGE_EMBED_DIM))
    face = face.astype(np.float32)  # a face embedding (FaceID), or CLIP's image_embeds (plain)
    feeds = {"image_embeds": face if kind in ("ip-adapter", "faceid") else clip}
    if kind == "faceid-plus":
        feeds["id_embeds"] = face
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds), strict=True))
    projection = diffusers_projection(tensors)
    expected = {}
    with torch.no_grad():
        if kind != "faceid-plus":
            expected["image_prompt_embeds"] = projection(torch.from_numpy(feeds["image_embeds"]))
        else:
            projection.clip_embeds = torch.from_numpy(clip)[:, None]  # [batch, images, tokens, w]
            expected["image_prompt_embeds"] = projection(torch.from_numpy(face))
            projection.shortcut, projection.shortcut_scale = True, 0.7  # Plus v2
            expected["shortcut"] = projection(torch.from_numpy(face))
            got["shortcut"] = got["id_prompt_embeds"] + 0.7 * got["image_prompt_embeds"]
    for name, want in expected.items():
        want = want.numpy()
        assert got[name].shape == want.shape == (2, 5 if kind == "full" else 4, CROSS_DIM)
        assert np.abs(want[1] - want[0]).max() > 1e-3  # the output depends on the input
        diff = np.abs(got[name] - want).max()
        print(kind, name, "max abs diff", diff)
        assert diff <= 1e-4 * max(1.0, np.abs(want).max())


def test_unknown_image_projection_is_refused(tmp_path, capsys):
    checkpoint = tmp_path / "other.safetensors"
    save_file({"image_proj.mystery.weight": np.zeros((4, 8), np.float32)}, checkpoint)
    assert main(["build", "--model", str(checkpoint), str(tmp_path / "onnx"), "--quiet"]) == 1
    assert "image projection (image_proj.*) is none that mobius builds" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize(
    ("kind", "dropped"),
    [("plus", "image_proj.layers.0.0.to_q.weight"), ("faceid-plus", "image_proj.proj.2.weight")],
)
def test_plus_missing_a_tensor_is_named(kind, dropped, tmp_path, capsys):
    from mobius_diffusion.testing._ip_adapter import random_image_proj

    tensors = random_image_proj(kind, IMAGE_EMBED_DIM, CROSS_DIM)
    del tensors[dropped]
    save_file(tensors, tmp_path / "plus.safetensors")
    args = ["build", "--model", str(tmp_path / "plus.safetensors"), str(tmp_path / "onnx")]
    assert main([*args, "--quiet"]) == 1
    assert dropped in capsys.readouterr().err


def test_a_resampler_layer_past_the_others_fails_the_build(tmp_path, capsys):
    """A stray tensor of a fifth layer (no to_q of its own) is unused: named, not dropped."""
    from mobius_diffusion.testing._ip_adapter import random_image_proj

    tensors = random_image_proj("plus", IMAGE_EMBED_DIM, CROSS_DIM)
    tensors["image_proj.layers.4.1.1.weight"] = tensors["image_proj.layers.0.1.1.weight"]
    save_file(tensors, tmp_path / "plus.safetensors")
    args = ["build", "--model", str(tmp_path / "plus.safetensors"), str(tmp_path / "onnx")]
    assert main([*args, "--quiet"]) == 1
    assert "image_proj.layers.4.1.1.weight" in capsys.readouterr().err
