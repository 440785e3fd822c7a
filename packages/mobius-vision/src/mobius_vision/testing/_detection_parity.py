"""Object-detection parity: class logits and boxes, ONNX Runtime against PyTorch.

A tiny ``XxxForObjectDetection`` (every parameter perturbed) is saved, built with the
CLI, and both run on a batch of two different random images. Where the graph takes
``pixel_mask`` the second image is smaller and padded at the bottom and right, as
DETR's processor pads a batch, so the mask's path through the model is compared too.
``logits`` are compared before any softmax or sigmoid and ``pred_boxes`` as the model
returns them (normalised, in [0, 1]); both stay near unit scale on these tiny models,
so the absolute tolerance :data:`~mobius.testing.PARITY_ATOL` applies as it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_vision.testing._vision_parity import VisionParity

TASK = "object-detection"
#: The contract's outputs (:mod:`mobius_vision.tasks.object_detection`).
_COMPARED = ("logits", "pred_boxes")
#: How far apart two random images' reference outputs must be for a comparison to count.
_MIN_IMAGE_SPREAD = 1e-3


def make_random_detector(hf_config, seed: int = 0, model_class: str | None = None):
    """A float32 ``AutoModelForObjectDetection`` (or ``model_class``), perturbed, eval."""
    import torch
    import transformers

    torch.manual_seed(seed)
    auto = transformers.AutoModelForObjectDetection
    if model_class is not None:
        auto = getattr(transformers, model_class)
        hf_config.architectures = [model_class]
    kwargs = dict(dtype=torch.float32, attn_implementation="eager")
    if hasattr(auto, "from_config"):
        model = auto.from_config(hf_config, **kwargs)
    else:
        model = auto._from_config(hf_config, **kwargs)
    perturb_parameters(model, seed)
    return model.eval()


def detection_inputs(
    image_size: tuple[int, int], batch: int, seed: int, padded: bool, channels: int = 3
) -> dict[str, np.ndarray]:
    """Random normalised-looking pixels ``[batch, channels, height, width]`` and their
    ``pixel_mask``; with ``padded`` each image after the first is smaller (by a quarter
    of each side), zero-padded at the bottom and right, its mask 0 there."""
    height, width = image_size
    rng = np.random.default_rng(seed)
    pixels = rng.standard_normal((batch, channels, height, width)).astype(np.float32)
    mask = np.ones((batch, height, width), np.int64)
    if padded:
        for index in range(1, batch):
            real_h, real_w = height - height // 4, width - width // 4
            mask[index, real_h:, :] = 0
            mask[index, :, real_w:] = 0
            pixels[index] *= mask[index][None]
    return {"pixel_values": pixels, "pixel_mask": mask}


def compare_detection(
    torch_model, session, feeds: dict[str, np.ndarray], min_spread: float = _MIN_IMAGE_SPREAD
) -> dict[str, float]:
    """Run ``feeds`` through both (the mask only where the graph takes it): the max abs
    difference of ``logits`` and ``pred_boxes``. A reference that differs by no more than
    ``min_spread`` between the images fails (a tiny model too tame to prove anything);
    ``--validate`` measures a real checkpoint and passes 0."""
    import torch

    names = [i.name for i in session.get_inputs()]
    feeds = {name: feeds[name] for name in names}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    with torch.no_grad():
        out = torch_model(**{name: torch.from_numpy(value) for name, value in feeds.items()})
    diffs = {}
    for name in _COMPARED:
        reference = getattr(out, name).float().numpy()
        spread = float(np.abs(reference[1:] - reference[:1]).max())
        assert spread > min_spread, (
            f"{name}: the PyTorch output barely depends on the image ({spread:.2e} between the "
            "images of the batch); the case's model is too tame"
        )
        assert got[name].shape == reference.shape, f"{name}: {got[name].shape} != {reference.shape}"
        diffs[name] = float(np.abs(got[name] - reference).max())
    return diffs


def check_detection_parity(
    hf_config,
    workdir: Path,
    *,
    image_size: tuple[int, int] = (64, 48),
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    model_class: str | None = None,
) -> list[VisionParity]:
    """Build a perturbed tiny detector with the CLI (once per ``eps`` entry) and compare
    ``logits`` and ``pred_boxes`` with PyTorch on ``batch`` random images of ``image_size``
    (padded where the graph takes ``pixel_mask``)."""
    import onnxruntime as ort

    workdir = Path(workdir)
    torch_model = make_random_detector(hf_config, seed, model_class)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        padded = any(i.name == "pixel_mask" for i in session.get_inputs())
        channels = getattr(hf_config, "num_channels", 3)
        feeds = detection_inputs(image_size, batch, seed, padded, channels)
        result = VisionParity(TASK, ep, compare_detection(torch_model, session, feeds))
        result.assert_close(atol)
        results.append(result)
    return results
