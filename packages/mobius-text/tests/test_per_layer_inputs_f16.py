"""Gemma 3n / Gemma 4 decoders build and run in f16: their float32 scale buffers are cast.

PyTorch keeps the per-layer input scales and the AltUp router scale as float32 buffers
that ``model.to(float16)`` casts; a graph that multiplied f16 activations by float32
constants did not load in ONNX Runtime. The f16 logits are as far from the float32
reference as PyTorch's own f16 run is (measured 0.016 on this case for both).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from text_parity_cases import TINY, all_cases
from transformers import AutoConfig

from mobius.testing import OnnxCausalLM, build_with_cli, left_padded_batch, make_random_model


@pytest.mark.parametrize("case", ["gemma3n-text", "gemma4-text"])
def test_f16_build_runs_as_pytorch_f16_does(case, tmp_path):
    model_type, overrides, *_ = all_cases()[case]
    config = AutoConfig.for_model(model_type, **{**TINY, **overrides})
    model = make_random_model(config)
    model.save_pretrained(tmp_path / "hf")
    ids, mask, positions = left_padded_batch([5, 3], config.vocab_size)
    real = mask.astype(bool)
    feeds = dict(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        position_ids=torch.from_numpy(positions),
    )
    with torch.no_grad():
        reference = model(**feeds).logits.numpy()
        torch_f16 = model.to(torch.float16)(**feeds).logits.float().numpy()
    torch_error = np.abs(torch_f16 - reference)[real].max()
    out = build_with_cli(tmp_path / "hf", tmp_path / "f16", "--dtype", "f16", "--ep", "cpu")
    graph = OnnxCausalLM(out / "model.onnx")
    logits, _ = graph(ids, mask, positions, graph.empty_cache(2))
    error = np.abs(logits.astype(np.float32) - reference)[real].max()
    assert error <= max(2 * torch_error, 0.02), (error, torch_error)
