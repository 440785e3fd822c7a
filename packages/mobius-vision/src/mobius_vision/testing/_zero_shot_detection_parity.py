"""Zero-shot object-detection parity: query embeddings, logits and boxes, ONNX Runtime against PyTorch.

A tiny ``XxxForObjectDetection`` (OWL-ViT, OWLv2; every parameter perturbed) is saved,
built with the CLI, and both run on a batch of two different random images with several
query texts of different lengths (padded at the end). The package's text graph embeds the
queries once; its image graph takes those embeddings. transformers takes the queries once
per image (``input_ids`` [images * texts, sequence]), each starting with a non-zero id so
that none counts as a padded query. Every output of the contract is compared by its max
abs difference, divided by the output's scale (its max abs reference value) where that is
above 1: the logits and OWLv2's objectness logits come out of two perturbed dense layers
and the learned per-patch logit scale, and reach 100-200 on these tiny models, where
float32 values are 1.5e-5 apart (measured: OWLv2's objectness 1.1e-4 at a scale of
169, 7e-7 relative). The boxes, embeddings and ``text_embeds`` are within [-5, 5], so they
meet :data:`~mobius.testing.PARITY_ATOL` as absolute differences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity
from mobius_vision.testing._vision_parity import random_pixels

#: How far apart two random images' reference outputs must be for a comparison to count.
_MIN_IMAGE_SPREAD = 1e-3


def make_random_open_detector(hf_config, seed: int = 0):
    """A float32 ``AutoModelForZeroShotObjectDetection``, every parameter perturbed, eval."""
    import torch
    from transformers import AutoModelForZeroShotObjectDetection

    torch.manual_seed(seed)
    model = AutoModelForZeroShotObjectDetection.from_config(
        hf_config, dtype=torch.float32, attn_implementation="eager"
    )
    perturb_parameters(model, seed)
    return model.eval()


def query_batch(lengths: tuple[int, ...], vocab_size: int, seed: int):
    """``(input_ids, attention_mask)`` [texts, max(lengths)] int64: random ids in
    ``[1, vocab_size - 1)`` ended by the largest id (the end token OWL-ViT pools at),
    padded with 0 after it."""
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = np.zeros((len(lengths), width), np.int64)
    mask = np.zeros((len(lengths), width), np.int64)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = rng.integers(1, vocab_size - 1, length - 1)
        ids[row, length - 1] = vocab_size - 1
        mask[row, :length] = 1
    return ids, mask


@dataclass
class ZeroShotDetectionParity:
    """Max abs differences of the contract's outputs by name (relative to the output's scale
    where it is above 1)."""

    ep: str
    diffs: dict[str, float] = field(default_factory=dict)
    #: The outputs a comparison must hold.
    required: ClassVar[tuple[str, ...]] = ("text_embeds", "logits", "pred_boxes")

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        for name in self.required:
            assert name in self.diffs, f"--ep {self.ep}: {name} not compared ({self.diffs})"
        worst = max(self.diffs.values())
        assert worst <= atol, f"--ep {self.ep}: {self.diffs} > {atol:g}"


def zero_shot_detection_sessions(package: Path):
    """``(text, image)``: ONNX Runtime CPU sessions of a package's two graphs."""
    import onnxruntime as ort

    return tuple(
        ort.InferenceSession(str(package / name / "model.onnx"), providers=["CPUExecutionProvider"])
        for name in ("text", "image")
    )


def compare_zero_shot_detection(
    torch_model,
    sessions,
    input_ids,
    attention_mask,
    pixels,
    min_spread: float = _MIN_IMAGE_SPREAD,
) -> dict[str, float]:
    """Run the package's two graphs (``sessions``: text, image) and PyTorch on the same
    queries and images: the max abs difference of each output the image graph has (and of
    ``text_embeds``), divided by the output's max abs value where that is above 1 (module
    docstring). Each reference output must differ between the images by ``min_spread``."""
    import torch

    text, image = sessions
    (text_embeds,) = text.run(
        ["text_embeds"], {"input_ids": input_ids, "attention_mask": attention_mask}
    )
    names = [o.name for o in image.get_outputs()]
    feeds = {"pixel_values": pixels, "text_embeds": text_embeds}
    got = dict(zip(names, image.run(None, feeds), strict=True))
    images = pixels.shape[0]
    with torch.no_grad():
        out = torch_model(
            input_ids=torch.from_numpy(np.tile(input_ids, (images, 1))),
            attention_mask=torch.from_numpy(np.tile(attention_mask, (images, 1))),
            pixel_values=torch.from_numpy(pixels),
        )
    reference_text = out.text_embeds[0].float().numpy()  # [texts, dim], the same per image
    diffs = {"text_embeds": float(np.abs(text_embeds - reference_text).max())}
    for name in names:
        reference = getattr(out, name).float().numpy()
        spread = float(np.abs(reference[1:] - reference[:1]).max())
        assert spread >= min_spread, (
            f"{name}: the PyTorch output barely depends on the image ({spread:.2e} between the "
            "images of the batch); the case's model is too tame"
        )
        assert got[name].shape == reference.shape, f"{name}: {got[name].shape} != {reference.shape}"
        scale = max(1.0, float(np.abs(reference).max()))
        diffs[name] = float(np.abs(got[name] - reference).max()) / scale
    return diffs


def check_zero_shot_detection_parity(
    hf_config,
    workdir: Path,
    *,
    lengths: tuple[int, ...] = (6, 3, 5),
    images: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
    grounded: dict | None = None,
) -> list[ZeroShotDetectionParity]:
    """Build a perturbed tiny open-vocabulary detector with the CLI (once per ``eps`` entry)
    and compare both graphs' outputs with PyTorch on ``images`` random images and query
    texts of ``lengths`` tokens. ``grounded`` (the options of
    :func:`~._grounded_detection_parity.check_grounded_detection_parity`, e.g. ``{}``): a
    family of the contract's grounded form (Grounding DINO), checked by that kit."""
    if grounded is not None:
        from mobius_vision.testing._grounded_detection_parity import (
            check_grounded_detection_parity,
        )

        return check_grounded_detection_parity(
            hf_config, workdir, seed=seed, atol=atol, eps=eps, **grounded
        )
    workdir = Path(workdir)
    torch_model = make_random_open_detector(hf_config, seed)
    config = torch_model.config
    input_ids, attention_mask = query_batch(lengths, config.text_config.vocab_size, seed)
    pixels = random_pixels(config.vision_config, images, seed)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            for graph in ("text", "image"):
                onnx.checker.check_model(str(out / graph / "model.onnx"), full_check=True)
        sessions = zero_shot_detection_sessions(out)
        diffs = compare_zero_shot_detection(
            torch_model, sessions, input_ids, attention_mask, pixels
        )
        result = ZeroShotDetectionParity(ep, diffs)
        result.assert_close(atol)
        results.append(result)
    return results
