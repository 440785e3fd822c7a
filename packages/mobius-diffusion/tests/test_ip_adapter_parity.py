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


@pytest.mark.parametrize("kind", ["ip-adapter", "full"])
def test_ip_adapter_parity(kind, tmp_path):
    tensors = ip_adapter_tensors(kind)
    checkpoint = tmp_path / f"{kind}.safetensors"
    save_file(tensors, checkpoint)
    assert main(["build", "--model", str(checkpoint), str(tmp_path / "onnx"), "--quiet"]) == 0
    rng = np.random.default_rng(1)
    shape = (2, IMAGE_EMBED_DIM) if kind == "ip-adapter" else (2, 5, IMAGE_EMBED_DIM)
    image_embeds = rng.standard_normal(shape).astype(np.float32)
    session = ort.InferenceSession(
        str(tmp_path / "onnx/model.onnx"), providers=["CPUExecutionProvider"]
    )
    (got,) = session.run(None, {"image_embeds": image_embeds})
    with torch.no_grad():
        expected = diffusers_projection(tensors)(torch.from_numpy(image_embeds)).numpy()
    assert got.shape == expected.shape
    assert np.abs(expected[1] - expected[0]).max() > 1e-3  # the output depends on the input
    assert np.abs(got - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max())


def test_lone_safetensors_file_nobody_recognises(tmp_path, capsys):
    checkpoint = tmp_path / "weights.safetensors"
    save_file({"encoder.weight": np.zeros((2, 2), np.float32)}, checkpoint)
    assert main(["build", "--model", str(checkpoint), str(tmp_path / "onnx"), "--quiet"]) == 1
    assert "no installed mobius package recognises its tensors" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


def test_ip_adapter_plus_is_refused(tmp_path, capsys):
    checkpoint = tmp_path / "plus.safetensors"
    save_file({"image_proj.latents": np.zeros((1, 4, 8), np.float32)}, checkpoint)
    assert main(["build", "--model", str(checkpoint), str(tmp_path / "onnx"), "--quiet"]) == 1
    assert "Plus / FaceID resampler) is not built" in capsys.readouterr().err
