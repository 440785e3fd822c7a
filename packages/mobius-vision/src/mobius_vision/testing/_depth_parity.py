"""Depth-estimation parity: ``predicted_depth`` in ONNX Runtime against transformers' PyTorch.

A tiny random ``AutoModelForDepthEstimation`` (every parameter perturbed) is saved,
built with the CLI as a user builds it, and both run a batch of two different
random images at an image size of the case's choosing (not the position table's, so
that interpolated positions are exercised where the family has them). The max abs
difference of every output must be <= ``PARITY_ATOL`` relative to the output's scale
(its largest magnitude, when above 1): depth heads end in a ReLU times ``max_depth``,
so their values can be large while float32 rounding grows with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity

#: transformers output fields compared with the graph outputs of the same name (Depth Pro's
#: ``field_of_view`` [batch], in degrees, where its FOV head is built).
_COMPARED = ("predicted_depth", "field_of_view", "domain_logits")
#: How far apart two images' reference depths must be, relative to the depth's magnitude, for a
#: comparison to count (a tiny model whose head's biases swamp the image proves little).
_MIN_IMAGE_SPREAD = 1e-2


@dataclass
class DepthParity:
    """Max abs differences (scaled, see the module docstring) of one build's outputs."""

    ep: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.diffs, f"--ep {self.ep}: no output was compared"
        worst = max(self.diffs.values())
        assert worst <= atol, f"--ep {self.ep}: {self.diffs} > {atol:g}"


def make_random_depth_model(hf_config, seed: int = 0):
    """A float32 ``AutoModelForDepthEstimation`` of ``hf_config``, perturbed, eval."""
    import torch
    from transformers import AutoModelForDepthEstimation

    torch.manual_seed(seed)
    model = AutoModelForDepthEstimation.from_config(hf_config, dtype=torch.float32)
    perturb_parameters(model, seed)
    return model.eval()


def random_images(batch: int, size: tuple[int, int], channels: int = 3, seed: int = 0):
    """Normalised-looking pixels ``[batch, channels, height, width]``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, channels, *size)).astype(np.float32)


def compare_depth(torch_model, session, inputs: dict[str, np.ndarray]) -> dict[str, float]:
    """Every output both have: the max abs difference over the output's scale (>= 1)."""
    import torch

    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, inputs), strict=True))
    with torch.no_grad():
        out = torch_model(**{name: torch.from_numpy(value) for name, value in inputs.items()})
    diffs = {}
    for name in _COMPARED:
        reference = getattr(out, name, None)
        if reference is None or name not in got:
            continue
        reference = reference.float().numpy()
        assert got[name].shape == reference.shape, f"{name}: {got[name].shape} != {reference.shape}"
        magnitude = float(np.abs(reference).max())
        spread = float(np.abs(reference[1:] - reference[:1]).max())
        assert spread > _MIN_IMAGE_SPREAD * magnitude, (
            f"{name}: the PyTorch output barely depends on the image ({spread:.2e} of "
            f"{magnitude:.2e}); raise the case's initializer_range"
        )
        scale = max(1.0, magnitude)
        diffs[name] = float(np.abs(got[name] - reference).max()) / scale
    missing = [n for n in got if n not in diffs]
    assert not missing, f"graph outputs with no PyTorch counterpart compared: {missing}"
    return diffs


def check_depth_parity(
    hf_config,
    workdir: Path,
    *,
    image_size: tuple[int, int],
    prompt_size: tuple[int, int] | None = None,
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[DepthParity]:
    """Build a perturbed tiny depth model with the CLI (per ``--ep``) and check it against PyTorch
    on ``batch`` random images of ``image_size`` ``(height, width)`` (and, with
    ``prompt_size``, random positive prompt depths of that size: Prompt Depth Anything)."""
    import onnxruntime as ort

    workdir = Path(workdir)
    torch_model = make_random_depth_model(hf_config, seed)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    inputs = {"pixel_values": random_images(batch, image_size, seed=seed)}
    if prompt_size is not None:
        rng = np.random.default_rng(seed + 1)
        inputs["prompt_depth"] = rng.uniform(0.5, 5.0, (batch, 1, *prompt_size)).astype(np.float32)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        result = DepthParity(ep, compare_depth(torch_model, session, inputs))
        result.assert_close(atol)
        results.append(result)
    return results
