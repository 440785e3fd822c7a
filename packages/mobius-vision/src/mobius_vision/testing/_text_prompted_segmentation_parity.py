"""Text-prompted segmentation parity (CLIPSeg): prompt embeddings and mask logits, ONNX Runtime
against PyTorch.

A tiny ``CLIPSegForImageSegmentation`` (every parameter perturbed) is saved with a
``preprocessor_config.json`` of the image size to build for (a size other than the vision
config's makes the build resize the position table, as transformers' default
``interpolate_pos_encoding`` does), built with the CLI, and run on a batch of two random
images and two prompts of different lengths (padded at the end). The package's text graph
embeds the prompts once and its image graph scores every image against every prompt;
transformers pairs images and prompts row by row, so it runs each (image, prompt) pair as
one row of a batch of ``images * prompts``. Both outputs are compared by their max abs
difference, divided by the output's scale (its largest reference magnitude) where that is
above 1: the mask logits leave a transposed convolution over perturbed weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity
from mobius_vision.testing._segmentation_parity import random_image_batch, scaled_difference
from mobius_vision.testing._zero_shot_detection_parity import (
    query_batch,
    zero_shot_detection_sessions,  # the same text/ and image/ graphs' sessions
)

#: transformers' class of the contract's one family.
REFERENCE_CLASS = "CLIPSegForImageSegmentation"
#: How far apart the reference logits of two images (and of two prompts) must be.
_MIN_SPREAD = 1e-3
#: ImageNet's mean and deviation, as CLIPSeg's ``ViTImageProcessor`` normalises.
IMAGENET_MEAN_STD = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def make_random_clipseg(hf_config, seed: int = 0):
    """A float32 ``CLIPSegForImageSegmentation``, every parameter perturbed, eval."""
    import torch
    import transformers

    torch.manual_seed(seed)
    model = getattr(transformers, REFERENCE_CLASS)(hf_config).to(torch.float32)
    perturb_parameters(model, seed)
    return model.eval()


def save_image_processor(source: Path, size: tuple[int, int]) -> None:
    """A ``preprocessor_config.json`` (CLIPSeg's ``ViTImageProcessor``) resizing to ``size``."""
    from transformers import ViTImageProcessor

    mean, std = IMAGENET_MEAN_STD
    processor = ViTImageProcessor(
        size={"height": size[0], "width": size[1]}, image_mean=mean, image_std=std
    )
    processor.save_pretrained(source)


@dataclass
class TextPromptedSegmentationParity:
    """Max abs differences of the contract's outputs by name (relative above a scale of 1)."""

    ep: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        for name in ("conditional_embeddings", "logits"):
            assert name in self.diffs, f"--ep {self.ep}: {name} not compared ({self.diffs})"
        worst = max(self.diffs.values())
        assert worst <= atol, f"--ep {self.ep}: {self.diffs} > {atol:g}"


def compare_text_prompted_segmentation(
    torch_model, sessions, input_ids, attention_mask, pixels, min_spread: float = _MIN_SPREAD
) -> dict[str, float]:
    """Run the package's two graphs and PyTorch (every image with every prompt, as rows of one
    batch) on the same prompts and images: each output's scaled max abs difference (module
    docstring). The reference logits must differ by ``min_spread`` between the images and
    between the prompts (a decoder that ignored either could not pass)."""
    import torch

    text, image = sessions
    (embeddings,) = text.run(
        ["conditional_embeddings"], {"input_ids": input_ids, "attention_mask": attention_mask}
    )
    (logits,) = image.run(
        ["logits"], {"pixel_values": pixels, "conditional_embeddings": embeddings}
    )
    images, prompts = pixels.shape[0], input_ids.shape[0]
    with torch.no_grad():
        out = torch_model(
            input_ids=torch.from_numpy(np.tile(input_ids, (images, 1))),
            attention_mask=torch.from_numpy(np.tile(attention_mask, (images, 1))),
            pixel_values=torch.from_numpy(np.repeat(pixels, prompts, axis=0)),
        )
    reference = out.logits.numpy().reshape(images, prompts, *out.logits.shape[1:])
    for axis, what in ((0, "images"), (1, "prompts")):
        spread = float(np.abs(np.diff(reference, axis=axis)).max())
        assert spread >= min_spread, (
            f"the PyTorch logits barely depend on the {what} ({spread:.2e}); the case's model "
            "is too tame"
        )
    assert logits.shape == reference.shape, f"logits: {logits.shape} != {reference.shape}"
    reference_embeddings = out.conditional_embeddings[:prompts].numpy()
    return {
        "conditional_embeddings": scaled_difference(embeddings, reference_embeddings),
        "logits": scaled_difference(logits, reference),
    }


def check_text_prompted_segmentation_parity(
    hf_config,
    workdir: Path,
    *,
    image_size: tuple[int, int] | None = None,
    lengths: tuple[int, ...] = (6, 3),
    images: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[TextPromptedSegmentationParity]:
    """Build a perturbed tiny CLIPSeg with the CLI (once per ``eps`` entry; with a
    ``preprocessor_config.json`` of ``image_size`` where given) and compare both graphs with
    PyTorch on ``images`` random images and prompts of ``lengths`` tokens."""
    workdir = Path(workdir)
    torch_model = make_random_clipseg(hf_config, seed)
    config = torch_model.config
    input_ids, attention_mask = query_batch(lengths, config.text_config.vocab_size, seed)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    if image_size is not None:
        save_image_processor(source, image_size)
    size = image_size or (config.vision_config.image_size,) * 2
    pixels = random_image_batch(images, config.vision_config.num_channels, size, seed)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            for graph in ("text", "image"):
                onnx.checker.check_model(str(out / graph / "model.onnx"), full_check=True)
        diffs = compare_text_prompted_segmentation(
            torch_model, zero_shot_detection_sessions(out), input_ids, attention_mask, pixels
        )
        result = TextPromptedSegmentationParity(ep, diffs)
        result.assert_close(atol)
        results.append(result)
    return results
