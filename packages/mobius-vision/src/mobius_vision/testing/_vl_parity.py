"""Vision–language parity: prefill with images and cached decode, ONNX Runtime against PyTorch.

The prompts go through the family's real transformers processor (built from a
config by the case, over :func:`mobius.testing.tiny_tokenizer`), so the image placeholders sit
where the processor puts them; the images are random pixels at a size the
processor resizes from.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from mobius.testing import (
    PARITY_ATOL,
    CausalLMParity,
    OnnxCausalLM,
    build_with_cli,
    perturb_parameters,
)
from mobius_vision.vl_model import OnnxVisionLanguage

PROMPTS = ("USER: <image>\nw5 w7 w9 ASSISTANT:", "USER: w3 <image>\nw2 ASSISTANT: w4")


def random_images(count: int, size: tuple[int, int], seed: int) -> list[np.ndarray]:
    """``count`` random RGB images ``[height, width, 3]`` uint8."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*size, 3), dtype=np.uint8) for _ in range(count)]


def make_random_vl_model(hf_config, seed: int = 0):
    """A float32 transformers image-text-to-text model, every parameter perturbed, eval."""
    import torch
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(
        hf_config, dtype=torch.float32, attn_implementation="eager"
    )
    perturb_parameters(model, seed)
    return model.eval()


def _decoder_session(path: Path):
    """The decoder's session as core's kit opens a causal LM (two intra-op threads)."""
    return OnnxCausalLM(path).session


def compare_vision_language(
    torch_model,
    onnx_model: OnnxVisionLanguage,
    inputs: dict[str, Any],
    decode_steps: int = 8,
    first_position: int = 0,
    rope_positions=None,
    decode_model=None,
    prefill_model=None,
) -> CausalLMParity:
    """Prefill with the processor's ``inputs``, then greedy decode steps through both caches.

    ``rope_positions(torch_model, inputs) -> (positions [streams, batch, sequence], deltas
    [batch, 1])`` gives families with multi-axis rotary positions (Qwen2-VL's M-RoPE: 3
    streams, HunYuan-VL's: 3 or 4) the prefill positions their model computes; decode steps
    then feed the text position plus ``deltas`` on every stream, as their ``generate`` does.

    ``decode_model(torch_model) -> module`` runs the decode steps on the PyTorch side where
    the family's forward needs the images on every call and its ``generate`` decodes with
    an inner model (BLIP-2's ``language_model``). ``prefill_model(torch_model) -> callable``
    runs the prefill where the family's forward cannot take the kit's feeds as they are
    (InstructBLIP-Video's hands ``position_ids`` on to its Q-Former too).
    """
    import torch
    from transformers import DynamicCache

    input_ids = inputs["input_ids"].astype(np.int64)
    mask = inputs["attention_mask"].astype(np.int64)
    types = inputs.get("token_type_ids")
    text_inputs = ("input_ids", "attention_mask", "token_type_ids", "labels", "mm_token_type_ids")
    vision = {k: v for k, v in inputs.items() if k not in text_inputs}
    # transformers reads token_type_ids at prefill where the model takes them (Gemma 3's images)
    takes_types = "token_type_ids" in inspect.signature(torch_model.forward).parameters
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0) + first_position
    real = mask.astype(bool)
    deltas = None
    if rope_positions is not None:
        rope, deltas = (np.asarray(a, np.int64) for a in rope_positions(torch_model, inputs))
    cache = DynamicCache(config=torch_model.config)
    onnx_cache = onnx_model.empty_cache(len(input_ids))
    result = CausalLMParity()
    for step in range(decode_steps + 1):
        fed_positions = positions
        if deltas is not None:  # multi-axis rotary positions
            fed_positions = rope if step == 0 else np.stack([positions + deltas] * len(rope))
        feeds = dict(
            input_ids=torch.from_numpy(input_ids),
            attention_mask=torch.from_numpy(mask),
            position_ids=torch.from_numpy(fed_positions),
            past_key_values=cache,
            use_cache=True,
        )
        if step == 0:
            feeds.update({k: torch.from_numpy(v) for k, v in vision.items()})
            if takes_types and types is not None:
                feeds["token_type_ids"] = torch.from_numpy(types)
        stepper = torch_model
        if step == 0 and prefill_model is not None:
            stepper = prefill_model(torch_model)
        elif step > 0 and decode_model is not None:
            stepper = decode_model(torch_model)
        with torch.no_grad():
            torch_logits = stepper(**feeds).logits.float().numpy()
        onnx_logits, onnx_cache = onnx_model(
            input_ids,
            vision if step == 0 else None,
            mask,
            fed_positions,
            onnx_cache,
            types if step == 0 and takes_types else None,
        )
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
    return result


def check_vision_language_parity(
    hf_config,
    processor,
    workdir: Path,
    *,
    prompts: tuple[str, ...] = PROMPTS,
    image_size: tuple[int, int] = (37, 45),
    image_sizes: tuple[tuple[int, int], ...] | None = None,
    decode_steps: int = 8,
    seed: int = 0,
    atol: float = PARITY_ATOL,
    forms: tuple[str, ...] = ("split", "single"),
    eps: tuple[str, ...] = ("default", "cpu"),
    images_per_prompt: bool = False,
    first_position: int = 0,
    image_counts: tuple[int, ...] | None = None,
    rope_positions=None,
    decode_model=None,
    prefill_model=None,
) -> list[CausalLMParity]:
    """Build a perturbed tiny VL model with the CLI per form and ep, and check it against PyTorch.

    ``processor`` is the family's transformers processor; each prompt holds one
    image placeholder and gets one random image of ``image_size`` (``images_per_prompt``:
    passed as one list per prompt, for processors that want them so). Positions count
    from ``first_position``, as the family's ``generate`` counts them. ``image_counts``
    gives each prompt that many images instead (its prompt holds as many placeholders),
    ``image_sizes`` one size per image. ``rope_positions``, ``decode_model``: see
    :func:`compare_vision_language`.
    """
    workdir = Path(workdir)
    torch_model = make_random_vl_model(hf_config, seed)
    torch_model.save_pretrained(workdir / "hf")
    count = len(prompts) if image_counts is None else sum(image_counts)
    if image_sizes is None:
        images = random_images(count, image_size, seed)
    else:  # one size per image (images of different shapes in one batch)
        images = [random_images(1, size, seed + i)[0] for i, size in enumerate(image_sizes)]
    if image_counts is not None:  # several images in a prompt: one list of images per prompt
        ends = np.cumsum(image_counts).tolist()
        images = [images[end - n : end] for n, end in zip(image_counts, ends, strict=True)]
    if images_per_prompt:
        images = [[image] for image in images]
    inputs = dict(processor(text=list(prompts), images=images, return_tensors="np", padding=True))
    inputs = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in inputs.items()}
    return compare_every_build(
        torch_model,
        inputs,
        workdir,
        forms=forms,
        eps=eps,
        atol=atol,
        decode_steps=decode_steps,
        first_position=first_position,
        rope_positions=rope_positions,
        decode_model=decode_model,
        prefill_model=prefill_model,
    )


def compare_every_build(
    reference,
    inputs: dict[str, np.ndarray],
    workdir: Path,
    *,
    forms: tuple[str, ...],
    eps: tuple[str, ...],
    atol: float,
    **compare,
) -> list[CausalLMParity]:
    """Build ``workdir/hf`` with the CLI per form and ep (the default ep's graphs checked by
    the ONNX checker) and compare each build with ``reference`` on ``inputs``
    (:func:`compare_vision_language`, given ``compare``); every one within ``atol``."""
    results = []
    for form in forms:
        for ep in eps:
            out = build_with_cli(
                workdir / "hf", workdir / f"{form}-{ep}", "--ep", ep, "--form", form
            )
            if ep == "default":
                for path in sorted(out.rglob("*.onnx")):
                    onnx.checker.check_model(str(path), full_check=True)
            onnx_model = OnnxVisionLanguage(out, decoder_session=_decoder_session)
            result = compare_vision_language(reference, onnx_model, inputs, **compare)
            result.ep = f"{ep} --form {form}"
            result.assert_close(atol)
            results.append(result)
    return results
