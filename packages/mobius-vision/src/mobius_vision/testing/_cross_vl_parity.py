"""Cross-attention vision–language parity (Mllama): the image's cache once, then cached decode.

The prompts and images go through the family's real processor; the built package's
vision graph makes the cross-attention cache once and the decoder reads it at every
step (:mod:`mobius_vision.tasks.cross_attention_vl`), against the transformers model's own
prefill and cached decode steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from mobius.testing import PARITY_ATOL, CausalLMParity, build_with_cli
from mobius_vision.testing._vl_parity import make_random_vl_model, random_images


def open_gates(model, seed: int = 0, low: float = 0.5, high: float = 1.5) -> None:
    """Give every one-element ``gate`` parameter a magnitude in ``[low, high]``, random sign.

    Mllama's tanh gates start at zero (and perturbation leaves them near it), which would
    let the cross-attention, and the tile embeddings, barely matter to the logits.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if "gate" in name.rsplit(".", 1)[-1] and param.numel() == 1:
                size = low + (high - low) * torch.rand(1, generator=generator)
                sign = 1.0 if torch.rand(1, generator=generator) < 0.5 else -1.0
                param.copy_(sign * size)


class OnnxCrossAttentionVL:
    """A built split package: the vision graph once, the decoder step by step."""

    def __init__(self, package: Path) -> None:
        import onnxruntime as ort

        load = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])  # noqa: E731
        self.vision = load(package / "vision/model.onnx")
        self.decoder = load(package / "decoder/model.onnx")
        self.output_names = [o.name for o in self.decoder.get_outputs()]

    def cross_cache(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [i.name for i in self.vision.get_inputs()]
        outputs = self.vision.run(None, {n: inputs[n] for n in names})
        return {
            o.name.replace("present.", "past_key_values."): value
            for o, value in zip(self.vision.get_outputs(), outputs, strict=True)
        }

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        cache = {}
        for i in self.decoder.get_inputs():
            if i.name.startswith("past_key_values.") and ".cross." not in i.name:
                _, heads, _, head_dim = i.shape
                cache[i.name] = np.zeros((batch, heads, 0, head_dim), np.float32)
        return cache

    def __call__(self, feeds: dict[str, np.ndarray]):
        outputs = dict(zip(self.output_names, self.decoder.run(None, feeds), strict=True))
        present = {
            name.replace("present.", "past_key_values."): value
            for name, value in outputs.items()
            if name.startswith("present.")
        }
        return outputs["logits"], present


def assert_images_matter(torch_model, inputs: dict[str, Any], least: float = 1e-3) -> None:
    """Fail a case whose PyTorch logits barely depend on the pixels (negated here).

    Parity at 1e-4 says little about the vision side when its effect is below that.
    """
    import torch

    def logits(pixels):
        feeds = {k: torch.from_numpy(v) for k, v in inputs.items()}
        feeds["pixel_values"] = torch.from_numpy(pixels)
        with torch.no_grad():
            return torch_model(**feeds).logits.float().numpy()

    pixels = inputs["pixel_values"]
    moved = float(np.abs(logits(pixels) - logits(-pixels)).max())
    assert moved > least, f"the logits move by {moved:.2g} with other pixels: raise the gates"


def compare_cross_attention_vl(
    torch_model, onnx_model: OnnxCrossAttentionVL, inputs: dict[str, Any], decode_steps: int = 8
) -> CausalLMParity:
    """Prefill with the processor's ``inputs``, then greedy decode steps through both caches.

    Decode steps repeat the last row of ``cross_attention_mask``, as ``generate`` does.
    """
    import torch
    from transformers import DynamicCache

    input_ids = inputs["input_ids"].astype(np.int64)
    mask = inputs["attention_mask"].astype(np.int64)
    cross_mask = inputs["cross_attention_mask"].astype(np.int64)
    vision = {k: inputs[k] for k in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask")}
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    real = mask.astype(bool)
    cross = onnx_model.cross_cache(vision)
    cache = DynamicCache(config=torch_model.config)
    onnx_cache = onnx_model.empty_cache(len(input_ids))
    result = CausalLMParity()
    for step in range(decode_steps + 1):
        text = dict(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            cross_attention_mask=cross_mask,
        )
        feeds = {k: torch.from_numpy(v) for k, v in text.items()}
        if step == 0:
            feeds.update({k: torch.from_numpy(v) for k, v in vision.items()})
        with torch.no_grad():
            torch_logits = torch_model(**feeds, cache=cache, use_cache=True).logits
        torch_logits = torch_logits.float().numpy()
        onnx_logits, onnx_cache = onnx_model({**text, **onnx_cache, **cross})
        if step == 0:  # padded positions carry no meaning: compare real tokens only
            result.prefill_diff = float(np.abs(torch_logits - onnx_logits)[real].max())
        else:
            result.decode_diffs.append(float(np.abs(torch_logits - onnx_logits).max()))
        torch_next = torch_logits[:, -1].argmax(-1)
        result.torch_tokens.append(torch_next.tolist())
        result.onnx_tokens.append(onnx_logits[:, -1].argmax(-1).tolist())
        input_ids = torch_next[:, None].astype(np.int64)
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones_like(input_ids)], axis=1)
        cross_mask = cross_mask[:, -1:]
    return result


def check_cross_attention_vl_parity(
    hf_config,
    processor,
    workdir: Path,
    *,
    prompts: tuple[str, ...],
    image_sizes: tuple[tuple[int, int], ...],
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    eps: tuple[str, ...] = ("default", "cpu"),
) -> list[CausalLMParity]:
    """Build a perturbed tiny model (gates opened, :func:`open_gates`) with the CLI per ep
    and check it against PyTorch; prompt ``i`` gets one random image of ``image_sizes[i]``."""
    workdir = Path(workdir)
    torch_model = make_random_vl_model(hf_config, seed)
    open_gates(torch_model, seed)
    torch_model.save_pretrained(workdir / "hf")
    images = [[random_images(1, size, seed + i)[0]] for i, size in enumerate(image_sizes)]
    inputs = dict(processor(text=list(prompts), images=images, return_tensors="np", padding=True))
    inputs = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in inputs.items()}
    assert_images_matter(torch_model, inputs)
    results = []
    for ep in eps:
        out = build_with_cli(workdir / "hf", workdir / ep, "--ep", ep)
        if ep == "default":
            for path in sorted(out.rglob("*.onnx")):
                onnx.checker.check_model(str(path), full_check=True)
        result = compare_cross_attention_vl(
            torch_model, OnnxCrossAttentionVL(out), inputs, decode_steps
        )
        result.ep = ep
        result.assert_close(atol)
        results.append(result)
    return results
