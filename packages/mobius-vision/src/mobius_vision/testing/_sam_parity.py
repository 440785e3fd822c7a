"""Mask-generation parity (Segment Anything): both graphs in ONNX Runtime against PyTorch.

A tiny transformers ``SamModel`` (or the family's class) with every parameter perturbed
is saved, built with the CLI, and compared on a batch of two different random images:
``image_embeddings`` (and the family's other image outputs) against
``get_image_embeddings``; ``pred_masks`` and ``iou_scores`` (and SAM 2's
``object_score_logits``) against ``forward`` given the image embeddings, for four
prompts: points with mixed labels (one padded), a point and a box per prompt, boxes
alone, and a point with a mask prompt (``input_masks``) for every other image
(``has_input_mask`` 1, 0, ...: transformers, which takes a mask for all images or none,
runs image by image there). The other prompts pass ``has_input_mask`` 0, its no mask;
the points pass random masks with it, which must not be read. The decoder is fed the
ONNX image encoder's outputs, as a user runs the two graphs. Every difference is
absolute, at fp32: the cases' tiny models (``initializer_range`` 0.2) give mask logits
and IoU scores of order one, checked (at least 0.1), and a few units at most, so 1e-4
is the plain PARITY_ATOL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters, record_parity
from mobius_vision.config import image_size_pair

#: How far apart two images' reference outputs must be for a comparison to count.
_MIN_SPREAD = 1e-3
#: The least magnitude of the decoder's reference outputs: 1e-4 of a 1e-2 output is no test.
_MIN_SCALE = 0.1


def make_random_sam(hf_config, model_class: str = "SamModel", seed: int = 0):
    """A float32 transformers ``model_class`` of ``hf_config``, perturbed, eval, eager attention."""
    import torch
    import transformers

    torch.manual_seed(seed)
    hf_config._attn_implementation = "eager"
    model = getattr(transformers, model_class)(hf_config).to(torch.float32)
    perturb_parameters(model, seed)
    return model.eval()


def prompt_mask_size(decoder) -> int:
    """The side of the mask prompt a ``prompt_decoder`` session takes (``input_masks``)."""
    shape = {i.name: i.shape for i in decoder.get_inputs()}["input_masks"]
    return int(shape[-1])


def sam_prompts(
    image_size: int, batch: int, seed: int, mask_size: int
) -> dict[str, dict[str, np.ndarray]]:
    """The compared prompts, as the ``prompt_decoder`` graph takes them (pixels of the
    resized image): points (one padded with label -10), a point and a box each, boxes
    alone, a point and a ``mask_size`` square mask prompt for every other image."""
    rng = np.random.default_rng(seed)
    no_mask = dict(
        input_masks=np.zeros((batch, 1, mask_size, mask_size), np.float32),
        has_input_mask=np.zeros(batch, np.float32),
    )
    # logits of the size a previous prediction gives: a few units either side of 0
    masks = rng.normal(0.0, 3.0, (batch, 1, mask_size, mask_size)).astype(np.float32)
    every_other = (np.arange(batch) % 2 == 0).astype(np.float32)
    with_mask = dict(input_masks=masks, has_input_mask=every_other)

    def points(point_batch, count):
        return rng.uniform(0, image_size, (batch, point_batch, count, 2)).astype(np.float32)

    def boxes(count):
        corners = np.sort(rng.uniform(0, image_size, (batch, count, 2, 2)), axis=2)
        return corners.reshape(batch, count, 4).astype(np.float32)

    labels = np.array([[[1, 0, 1], [1, -1, -10]]] * batch, np.int64)
    return {
        "points": dict(
            input_points=points(2, 3),
            input_labels=labels,
            input_boxes=boxes(0),
            # a mask whose flag is 0 is not read: transformers' no mask
            input_masks=masks,
            has_input_mask=no_mask["has_input_mask"],
        ),
        "points_and_boxes": dict(
            input_points=points(2, 1),
            input_labels=np.ones((batch, 2, 1), np.int64),
            input_boxes=boxes(2),
            **no_mask,
        ),
        "boxes": dict(
            input_points=points(2, 0),
            input_labels=np.ones((batch, 2, 0), np.int64),
            input_boxes=boxes(2),
            **no_mask,
        ),
        "points_and_mask": dict(
            input_points=points(2, 1),
            input_labels=np.ones((batch, 2, 1), np.int64),
            input_boxes=boxes(0),
            **with_mask,
        ),
    }


def torch_prompt_arguments(prompt: dict[str, np.ndarray]) -> dict:
    """The same prompt as transformers' ``forward`` takes it: absent parts are None (a mask
    prompt for every image or for none: transformers takes no mix, see
    :func:`torch_prompt_outputs`)."""
    import torch

    arguments = {}
    has_mask = prompt["has_input_mask"]
    if has_mask.all():
        arguments["input_masks"] = torch.from_numpy(prompt["input_masks"])
    elif has_mask.any():
        raise ValueError("transformers takes a mask prompt for every image or for none")
    if prompt["input_points"].shape[2]:
        arguments["input_points"] = torch.from_numpy(prompt["input_points"])
        arguments["input_labels"] = torch.from_numpy(prompt["input_labels"])
    if prompt["input_boxes"].shape[1]:
        arguments["input_boxes"] = torch.from_numpy(prompt["input_boxes"])
    return arguments


@dataclass
class MaskGenerationParity:
    """Max abs differences of each compared output (``prompt/output`` for the decoder's)."""

    model_type: str
    diffs: dict[str, float] = field(default_factory=dict)

    def assert_close(self, atol: float = PARITY_ATOL) -> None:
        record_parity(self)
        assert self.diffs, f"{self.model_type}: no output was compared"
        worst = max(self.diffs.values())
        assert worst <= atol, f"{self.model_type}: {self.diffs} > {atol:g}"


def _spread_checked(name: str, reference: np.ndarray) -> np.ndarray:
    """``reference``, after checking that its batch rows differ (a dead tiny model proves nothing)."""
    spread = float(np.abs(reference[1:] - reference[:1]).max())
    assert spread > _MIN_SPREAD, (
        f"{name}: the PyTorch output barely depends on the image ({spread:.2e}); "
        "raise the case's initializer_range"
    )
    return reference


def torch_image_outputs(torch_model, pixels: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """``get_image_embeddings``' outputs by graph name (``image_embeddings`` first; SAM-HQ's
    ``intermediate_embeddings`` become ``intermediate_embeddings.{i}``)."""
    import torch

    with torch.no_grad():
        out = torch_model.get_image_embeddings(torch.from_numpy(pixels))
    if isinstance(out, list):  # SAM2: [high_resolution_features..., image_embeddings]
        out = (out[-1], *out[:-1])
    values = list(out) if isinstance(out, tuple) else [out]
    flat = [values[0]]
    for extra in values[1:]:
        flat += list(extra) if isinstance(extra, (list, tuple)) else [extra]
    arrays = [v.float().numpy() for v in flat]
    assert len(arrays) == len(names), f"{len(arrays)} PyTorch image outputs for graphs {names}"
    return dict(zip(names, arrays, strict=True))


def torch_decoder_inputs(torch_model, image: dict[str, np.ndarray]) -> dict:
    """The image outputs as transformers' ``forward`` takes them (the family's class says)."""
    import torch

    embeddings = torch.from_numpy(image["image_embeddings"])
    high_resolution = sorted(k for k in image if k.startswith("high_resolution_features."))
    if high_resolution:  # SAM2 takes its three levels as one list, the embeddings last
        return {
            "image_embeddings": [*(torch.from_numpy(image[k]) for k in high_resolution), embeddings]
        }
    arguments = {"image_embeddings": embeddings}
    extra = [torch.from_numpy(v) for k, v in image.items() if k != "image_embeddings"]
    if extra:
        arguments["intermediate_embeddings"] = extra
    return arguments


def torch_prompt_outputs(torch_model, image: dict, prompt: dict, names: list[str]) -> dict:
    """transformers' ``forward`` outputs ``names`` given the image outputs and the prompt;
    image by image where only some images have a mask prompt."""
    import torch

    has_mask = prompt["has_input_mask"]
    if has_mask.any() and not has_mask.all():
        rows = [
            torch_prompt_outputs(
                torch_model,
                {k: v[i : i + 1] for k, v in image.items()},
                {k: v[i : i + 1] for k, v in prompt.items()},
                names,
            )
            for i in range(len(has_mask))
        ]
        return {name: np.concatenate([row[name] for row in rows]) for name in names}
    with torch.no_grad():
        reference = torch_model(
            **torch_decoder_inputs(torch_model, image),
            **torch_prompt_arguments(prompt),
            multimask_output=True,
        )
    return {name: getattr(reference, name).float().numpy() for name in names}


def compare_mask_generation(
    torch_model, encoder, decoder, pixels: np.ndarray, prompts: dict, *, checked: bool = True
) -> dict[str, float]:
    """Max abs differences of both graphs' outputs (ONNX Runtime sessions ``encoder`` and
    ``decoder``) from ``torch_model``'s on ``pixels`` and each of ``prompts``
    (:func:`sam_prompts`); ``checked``: assert that the outputs depend on the image and are
    large enough to prove something (module docstring)."""
    diffs = {}
    names = [o.name for o in encoder.get_outputs()]
    image = dict(zip(names, encoder.run(None, {"pixel_values": pixels}), strict=True))
    for name, reference in torch_image_outputs(torch_model, pixels, names).items():
        if checked:
            _spread_checked(name, reference)
        diffs[name] = float(np.abs(image[name] - reference).max())
    outputs = [o.name for o in decoder.get_outputs()]
    for prompt_name, prompt in prompts.items():
        got = dict(zip(outputs, decoder.run(outputs, {**image, **prompt}), strict=True))
        reference = torch_prompt_outputs(torch_model, image, prompt, outputs)
        for name in outputs:
            key = f"{prompt_name}/{name}"
            expected = reference[name]
            if checked:
                _spread_checked(key, expected)
                assert np.abs(expected).max() > _MIN_SCALE, (
                    f"{key}: outputs under {_MIN_SCALE}; raise initializer_range"
                )
            assert got[name].shape == expected.shape, (
                f"{key}: {got[name].shape} != {expected.shape}"
            )
            diffs[key] = float(np.abs(got[name] - expected).max())
    return diffs


def check_mask_generation_parity(
    hf_config,
    workdir: Path,
    *,
    model_class: str = "SamModel",
    batch: int = 2,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    ep: str = "default",
) -> MaskGenerationParity:
    """Build a perturbed tiny SAM-family model with the CLI (``--ep ep``) and check both
    graphs (module docstring)."""
    import onnxruntime as ort

    workdir = Path(workdir)
    torch_model = make_random_sam(hf_config, model_class, seed)
    torch_model.save_pretrained(workdir / "hf")
    out = build_with_cli(workdir / "hf", workdir / "onnx", "--ep", ep)
    sessions = []
    for graph in ("image_encoder", "prompt_decoder"):
        path = out / graph / "model.onnx"
        if ep == "default":  # fused ops are ONNX Runtime's contrib domain
            onnx.checker.check_model(str(path), full_check=True)
        sessions.append(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
    vision = hf_config.vision_config
    vision = getattr(vision, "backbone_config", None) or vision  # SAM2: the Hiera's config
    size = image_size_pair(vision.image_size)[0]
    pixels = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
    image_size = int(hf_config.prompt_encoder_config.image_size)
    prompts = sam_prompts(image_size, batch, seed, prompt_mask_size(sessions[1]))
    result = MaskGenerationParity(hf_config.model_type)
    result.diffs = compare_mask_generation(torch_model, *sessions, pixels, prompts)
    result.assert_close(atol)
    return result
