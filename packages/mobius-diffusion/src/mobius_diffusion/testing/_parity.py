"""Diffusion-component parity: each graph of a built component, ONNX Runtime against diffusers.

A tiny diffusers component is made from a config, every parameter perturbed,
saved with ``save_pretrained`` (``config.json`` naming its ``_class_name`` and
``diffusion_pytorch_model.safetensors``), built with the CLI path, and each graph
is run on the case's inputs beside the diffusers call that it stands for.
The bar is max abs difference <= ``atol`` relative to the output's scale:
``max|onnx - torch| <= atol * max(1, max|torch|)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity

#: How far apart two batch rows' reference outputs must be for a comparison to count.
_MIN_INPUT_SPREAD = 1e-4

#: ``reference(model, graph_path, torch_inputs) -> {output name: tensor}``
Reference = Callable[[object, str, dict], dict]


def make_random_diffusers_model(class_name: str, config: dict, seed: int = 0, scale: float = 0.05):
    """A float32 diffusers component of class ``class_name`` from ``config``, perturbed, eval."""
    import torch

    from mobius_diffusion.testing._references import diffusers_class

    torch.manual_seed(seed)
    model = diffusers_class(class_name).from_config(config)  # float32 by default
    perturb_parameters(model, seed, scale)
    return model.eval()


@dataclass
class DiffusionParity:
    """Per graph output: (max abs difference, the output's scale max|torch|)."""

    ep: str
    diffs: dict[str, tuple[float, float]] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.diffs, f"--ep {self.ep}: no output was compared"
        worst = {k: d for k, (d, s) in self.diffs.items() if d > atol * max(1.0, s)}
        assert not worst, f"--ep {self.ep}: {worst} over {atol:g} x max(1, scale): {self.diffs}"


def compare_graph(session, feed: dict[str, np.ndarray], reference: dict) -> dict:
    """Run ``feed`` through ``session``; (max abs diff, scale) of every output against ``reference``."""
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feed), strict=True))
    assert set(got) == set(reference), (
        f"graph outputs {sorted(got)} != reference {sorted(reference)}"
    )
    diffs = {}
    for name, expected in reference.items():
        expected = expected.detach().float().numpy()
        assert got[name].shape == expected.shape, f"{name}: {got[name].shape} != {expected.shape}"
        _assert_depends_on_input(name, expected)
        diffs[name] = (float(np.abs(got[name] - expected).max()), float(np.abs(expected).max()))
    return diffs


def _assert_depends_on_input(name: str, reference: np.ndarray) -> None:
    """A comparison proves little when every batch row gives the same output (a dead tiny model)."""
    if reference.ndim == 0 or reference.shape[0] < 2:
        return
    spread = float(np.abs(reference[1:] - reference[:1]).max())
    assert spread > _MIN_INPUT_SPREAD, (
        f"{name}: the PyTorch output barely depends on the input (rows differ by {spread:.2e})"
    )


def check_diffusion_parity(
    class_name: str,
    config: dict,
    inputs: dict[str, dict[str, np.ndarray]],
    reference: Reference,
    workdir: Path,
    *,
    seed: int = 0,
    scale: float = 0.05,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    build_args: tuple[str, ...] = (),
) -> list[DiffusionParity]:
    """Build a perturbed tiny ``class_name`` with the CLI and check every graph against diffusers.

    ``inputs`` maps each graph path of the package (``"model"``, ``"encoder/model"``)
    to its feed; ``reference(model, graph_path, torch_inputs)`` returns what that
    graph must output, by output name, computed with the diffusers model.
    """
    import onnxruntime as ort
    import torch

    workdir = Path(workdir)
    torch_model = make_random_diffusers_model(class_name, config, seed, scale)
    source = workdir / "hf"
    torch_model.save_pretrained(source, safe_serialization=True)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep, *build_args)
        result = DiffusionParity(ep)
        for graph_path, feed in inputs.items():
            path = out / f"{graph_path}.onnx"
            if ep == "default":
                onnx.checker.check_model(str(path), full_check=True)
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            with torch.no_grad():
                expected = reference(
                    torch_model, graph_path, {k: torch.from_numpy(v) for k, v in feed.items()}
                )
            for name, diff in compare_graph(session, feed, expected).items():
                result.diffs[f"{graph_path}:{name}"] = diff
        result.assert_close(atol)
        results.append(result)
    return results
