"""Vision-encoder parity: image features and class logits, ONNX Runtime against PyTorch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity
from mobius_vision.config import image_size_pair

#: How far apart two random images' reference outputs must be for a comparison to count.
_MIN_IMAGE_SPREAD = 1e-3

#: transformers output fields and the graph outputs they are compared with.
_COMPARED = {
    "last_hidden_state": "last_hidden_state",
    "pooler_output": "pooler_output",
    "image_embeds": "image_embeds",
    "cls_token_value": "cls_token_value",  # CvT's class token
}


def make_random_vision_model(hf_config, head: str, seed: int = 0, model_class: str | None = None):
    """A float32 transformers vision model for ``head``, perturbed, eval.

    ``AutoModel`` for ``none``, ``AutoModelForImageClassification`` for a classifier, or the
    transformers class named ``model_class`` (``CLIPVisionModelWithProjection``).
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    if model_class is not None:
        auto = getattr(transformers, model_class)
        hf_config.architectures = [model_class]
    elif head == "image-classification":
        auto = transformers.AutoModelForImageClassification
    else:
        auto = transformers.AutoModel
    kwargs = dict(dtype=torch.float32, attn_implementation="eager")
    if hasattr(auto, "from_config"):
        model = auto.from_config(hf_config, **kwargs)
    else:
        model = auto._from_config(hf_config, **kwargs)
    perturb_parameters(model, seed)
    return model.eval()


@dataclass
class VisionParity:
    """Max abs differences of one head's outputs."""

    head: str
    ep: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.diffs, f"--ep {self.ep} --head {self.head}: no output was compared"
        worst = max(self.diffs.values())
        assert worst <= atol, f"--ep {self.ep} --head {self.head}: {self.diffs} > {atol:g}"


def random_pixels(hf_config, batch: int, seed: int) -> np.ndarray:
    """Normalised-looking pixels ``[batch, channels, height, width]`` at the config's image size."""
    height, width = image_size_pair(getattr(hf_config, "image_size", 224))
    channels = getattr(hf_config, "num_channels", 3)
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, channels, height, width)).astype(np.float32)


def compare_vision(torch_model, session, pixels: np.ndarray) -> dict[str, float]:
    """Run ``pixels`` through both; the max abs difference of every output both have."""
    import torch

    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {"pixel_values": pixels}), strict=True))
    hidden_states = "penultimate_hidden_state" in got  # transformers' hidden_states[-2]
    with torch.no_grad():
        out = torch_model(pixel_values=torch.from_numpy(pixels), output_hidden_states=hidden_states)
    diffs = {}
    if hidden_states:
        reference = out.hidden_states[-2].float().numpy()
        diffs["penultimate_hidden_state"] = float(
            np.abs(got["penultimate_hidden_state"] - reference).max()
        )
    for field_name, output in {**_COMPARED, "logits": "logits"}.items():
        reference = getattr(out, field_name, None)
        if reference is not None and output in got:
            reference = reference.float().numpy()
            _assert_depends_on_image(output, reference)
            diffs[output] = float(np.abs(got[output] - reference).max())
    missing = [n for n in got if n not in diffs and n != "last_hidden_state"]
    assert not missing, f"graph outputs with no PyTorch counterpart compared: {missing}"
    return diffs


def _assert_depends_on_image(name: str, reference: np.ndarray) -> None:
    """A comparison proves nothing when every image gives the same output (a dead tiny model)."""
    if reference.shape[0] < 2:
        return
    spread = float(np.abs(reference[1:] - reference[:1]).max())
    assert spread > _MIN_IMAGE_SPREAD, (
        f"{name}: the PyTorch output barely depends on the image (max difference between the "
        f"images of the batch {spread:.2e}); raise the case's initializer_range"
    )


def check_vision_parity(
    hf_config,
    workdir: Path,
    *,
    heads: tuple[str, ...] = ("none", "image-classification"),
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    model_class: str | None = None,
) -> list[VisionParity]:
    """Build a perturbed tiny vision model per head with the CLI and check it against PyTorch.

    ``none`` compares ``last_hidden_state`` (and ``pooler_output`` where the model
    has one) with ``AutoModel``; ``image-classification`` compares ``logits`` with
    ``AutoModelForImageClassification``, on a batch of random pixels. ``model_class``
    names the transformers class to compare with instead (a projection variant).
    """
    import onnxruntime as ort

    workdir = Path(workdir)
    pixels = random_pixels(hf_config, batch, seed)
    results = []
    for head in heads:
        torch_model = make_random_vision_model(hf_config, head, seed, model_class)
        source = workdir / f"hf-{head}"
        torch_model.save_pretrained(source)
        for ep in eps:
            out = build_with_cli(source, workdir / f"onnx-{head}-{ep}", "--ep", ep, "--head", head)
            if ep == "default":
                onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
            session = ort.InferenceSession(
                str(out / "model.onnx"), providers=["CPUExecutionProvider"]
            )
            result = VisionParity(head, ep, compare_vision(torch_model, session, pixels))
            result.assert_close(atol)
            results.append(result)
    return results
