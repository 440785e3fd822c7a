"""Greedy reference tokens: transformers' ``generate`` and onnxruntime-genai's generator."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal


def torch_greedy(
    model: Any,
    prompt: list[int],
    new_tokens: int,
    *,
    eos: Literal["stop", "ignore", "suppress"] = "stop",
) -> list[int]:
    """transformers' greedy tokens after ``prompt`` (batch 1, full attention mask).

    ``eos`` says what an end-of-sequence token does:

    - ``"stop"``: generation ends there; the EOS token itself is not returned;
    - ``"ignore"``: it is an ordinary token, all ``new_tokens`` are returned
      (as mobius's generator with ``eos_token_ids=[]``);
    - ``"suppress"``: it is never chosen (``min_new_tokens``), as onnxruntime-genai's
      ``min_length`` does.
    """
    import torch

    options: dict[str, Any] = {}
    if eos == "ignore":
        options["eos_token_id"] = None
    elif eos == "suppress":
        options["min_new_tokens"] = new_tokens
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=new_tokens,
            pad_token_id=0,
            **options,
        )
    tokens = out[0, len(prompt) :].tolist()
    if eos == "stop":
        ends = model.generation_config.eos_token_id
        ends = set(ends if isinstance(ends, list) else [ends])
        cut = next((i for i, token in enumerate(tokens) if token in ends), len(tokens))
        tokens = tokens[:cut]
    return tokens


def genai_greedy(model: Any, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy tokens from onnxruntime-genai's generator, EOS suppressed by ``min_length``.

    ``model`` is an ``onnxruntime_genai.Model`` or the directory of a package to load.
    Compare with ``torch_greedy(..., eos="suppress")``.
    """
    import numpy as np
    import onnxruntime_genai as og

    if isinstance(model, (str, Path)):
        model = og.Model(og.Config(str(model)))
    params = og.GeneratorParams(model)
    total = len(prompt) + new_tokens
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][len(prompt) :]
