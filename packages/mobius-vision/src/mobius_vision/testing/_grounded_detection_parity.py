"""Grounded zero-shot detection parity (Grounding DINO, MM Grounding DINO): both graphs
against PyTorch.

A tiny ``XxxForObjectDetection`` (every parameter perturbed) is saved, built with the CLI,
and both run on two prompts of different lengths (several phrases each, the second
prompt ending in "?", the first padded at the end) and two random images, the second
padded at the bottom and right (``pixel_mask`` 0 there), as transformers' processor pads
a batch. The token ids are random but for BERT's phrase delimiters ([CLS] 101, [SEP] 102,
"." 1012, "?" 1029, which transformers hard-codes), so the vocabulary must reach 1030.

Two facts of the reference:

- transformers builds the model with eager attention but its BERT text backbone with
  SDPA (the default of ``from_config``/``from_pretrained``). The eager BERT would *add*
  the boolean phrase mask to its scores (``scores + True``) instead of masking; SDPA masks,
  as the original Grounding DINO does. The kit keeps the default, as the pipeline does.
- In float32, transformers' own result is off its float64 result by up to 5e-4 on the
  encoder's pixel states (scale 3) and 1e-3 on the query-selection scores (scale 18),
  measured on these tiny models; the graphs built here are within 1e-5 of the float64
  result. So the reference is the same PyTorch model run in float64: every output is
  compared with it by its max abs difference (relative to the output's scale where that
  is above 1, as the OWL kit does), ``-inf`` logits must be ``-inf`` in both.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_vision.testing._zero_shot_detection_parity import (
    ZeroShotDetectionParity,
    zero_shot_detection_sessions,
)

#: transformers' ``SPECIAL_TOKENS`` of Grounding DINO: [CLS], [SEP], "." and "?".
CLS, SEP, DOT, QUESTION = 101, 102, 1012, 1029
#: How far apart two images' reference outputs must be for a comparison to count.
_MIN_IMAGE_SPREAD = 1e-3


def make_random_grounded_detector(hf_config, seed: int = 0):
    """A float32 ``AutoModelForZeroShotObjectDetection`` with its default attention (module
    docstring), every parameter perturbed, eval."""
    import torch
    from transformers import AutoModelForZeroShotObjectDetection

    torch.manual_seed(seed)
    model = AutoModelForZeroShotObjectDetection.from_config(hf_config, dtype=torch.float32)
    perturb_parameters(model, seed)
    return model.eval()


def grounded_prompts(vocab_size: int, seed: int):
    """``(input_ids, attention_mask)`` [2, 10] int64: "[CLS] w w . w . [SEP]" padded with 0,
    and "[CLS] w w w . w w w ? [SEP]"; ``w`` random ids that are not delimiters."""
    if vocab_size <= QUESTION:
        raise ValueError(f"the text vocabulary ({vocab_size}) must hold BERT's id {QUESTION}")
    rng = np.random.default_rng(seed)

    def words(count):
        ids = rng.integers(CLS + 1, vocab_size, count)
        return [int(i) if i not in (DOT, QUESTION) else int(i) + 1 for i in ids]

    first = [CLS, *words(2), DOT, *words(1), DOT, SEP]
    second = [CLS, *words(3), DOT, *words(3), QUESTION, SEP]
    width = max(len(first), len(second))
    input_ids = np.zeros((2, width), np.int64)
    attention_mask = np.zeros((2, width), np.int64)
    for row, ids in enumerate((first, second)):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return input_ids, attention_mask


def padded_images(height: int, width: int, seed: int, channels: int = 3):
    """``(pixel_values [2, c, h, w] float32, pixel_mask [2, h, w] int64)``: two random images,
    the second's last quarter of rows and columns padding (zeros, mask 0)."""
    rng = np.random.default_rng(seed)
    pixels = rng.standard_normal((2, channels, height, width)).astype(np.float32)
    mask = np.ones((2, height, width), np.int64)
    mask[1, height - height // 4 :, :] = 0
    mask[1, :, width - width // 4 :] = 0
    pixels[1] *= mask[1]
    return pixels, mask


class GroundedDetectionParity(ZeroShotDetectionParity):
    """Max abs differences of the grounded contract's outputs by name (relative where the
    scale is above 1)."""

    required = ("text_features", "logits", "pred_boxes")


def _diff(got: np.ndarray, reference: np.ndarray, name: str) -> float:
    assert got.shape == reference.shape, f"{name}: {got.shape} != {reference.shape}"
    finite = np.isfinite(reference)
    assert np.array_equal(finite, np.isfinite(got)), f"{name}: -inf at other places"
    scale = max(1.0, float(np.abs(reference[finite]).max()))
    return float(np.abs(got[finite] - reference[finite]).max()) / scale


def reference_outputs(torch_model, input_ids, attention_mask, pixels, pixel_mask) -> dict:
    """The float64 PyTorch model's (module docstring) ``text_features``, phrase masks and
    positions, ``logits`` and ``pred_boxes`` on the prompts and images, as numpy arrays."""
    import torch
    from transformers.models.grounding_dino.modeling_grounding_dino import (
        generate_masks_with_special_tokens_and_transfer_map as phrase_masks,
    )

    reference = copy.deepcopy(torch_model).double()
    ids = torch.from_numpy(input_ids)
    mask, positions = phrase_masks(ids, torch.tensor([CLS, SEP, DOT, QUESTION]))
    with torch.no_grad():
        hidden = reference.model.text_backbone(
            ids, mask[:, None], torch.zeros_like(ids), positions
        ).last_hidden_state
        out = reference(
            pixel_values=torch.from_numpy(pixels).double(),
            pixel_mask=torch.from_numpy(pixel_mask),
            input_ids=ids,
            attention_mask=torch.from_numpy(attention_mask),
        )
        features = reference.model.text_projection(hidden)
    return {
        "text_features": features.numpy(),
        "text_self_attention_mask": mask.numpy(),
        "text_position_ids": positions.numpy(),
        "logits": out.logits.numpy(),
        "pred_boxes": out.pred_boxes.numpy(),
    }


def compare_grounded_detection(
    sessions, input_ids, attention_mask, pixels, pixel_mask, reference, min_spread=_MIN_IMAGE_SPREAD
) -> dict[str, float]:
    """Run the package's graphs (``sessions``: text, image) on the prompts and images and
    compare them with :func:`reference_outputs`: differences by output name (the phrase
    masks and positions must be equal)."""
    text, image = sessions
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
    text_out = dict(zip([o.name for o in text.get_outputs()], text.run(None, feeds), strict=True))
    for name in ("text_self_attention_mask", "text_position_ids"):
        assert np.array_equal(text_out[name], reference[name]), f"{name} differs"
    feeds = {"pixel_values": pixels, "pixel_mask": pixel_mask, "attention_mask": attention_mask}
    outputs = ["logits", "pred_boxes"]
    got = dict(zip(outputs, image.run(outputs, {**feeds, **text_out}), strict=True))
    diffs = {"text_features": _diff(text_out["text_features"], reference["text_features"], "")}
    for name in outputs:
        expected = reference[name]
        finite = np.where(np.isfinite(expected), expected, 0.0)
        spread = float(np.abs(finite[1:] - finite[:1]).max())
        assert spread >= min_spread, f"{name}: the PyTorch output barely depends on the image"
        diffs[name] = _diff(got[name], expected, name)
    return diffs


def check_grounded_detection_parity(
    hf_config,
    workdir: Path,
    *,
    image_size: tuple[int, int] = (64, 64),
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[GroundedDetectionParity]:
    """Build a perturbed tiny grounded detector with the CLI (once per ``eps`` entry) and
    compare both graphs with PyTorch on two prompts and two images of ``image_size``."""
    workdir = Path(workdir)
    torch_model = make_random_grounded_detector(hf_config, seed)
    input_ids, attention_mask = grounded_prompts(hf_config.text_config.vocab_size, seed)
    pixels, pixel_mask = padded_images(*image_size, seed)
    source = workdir / "hf"
    torch_model.save_pretrained(source)
    reference = reference_outputs(torch_model, input_ids, attention_mask, pixels, pixel_mask)
    results = []
    for ep in eps:
        out = build_with_cli(source, workdir / f"onnx-{ep}", "--ep", ep)
        if ep == "default":
            for graph in ("text", "image"):
                onnx.checker.check_model(str(out / graph / "model.onnx"), full_check=True)
        sessions = zero_shot_detection_sessions(out)
        diffs = compare_grounded_detection(
            sessions, input_ids, attention_mask, pixels, pixel_mask, reference
        )
        result = GroundedDetectionParity(ep, diffs)
        result.assert_close(atol)
        results.append(result)
    return results
