"""Gemma 4 with ``use_bidirectional_attention="vision"``: image tokens attend both ways on
sliding layers, against PyTorch.

transformers reads the runs of image tokens off the processor's ``mm_token_type_ids`` at
prefill, which the shared kit does not pass (it passes ``token_type_ids`` only), so the
torch model here is wrapped to take them at prefill, and the kit's comparison runs as
usual: both forms, both eps, prefill and 8 cached decode steps, a batch of two images of
different aspect ratios, 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vl_parity_cases.gemma4 import OPTIONS, TEXT, gemma4_config, gemma4_processor

from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_vision.testing import make_random_vl_model
from mobius_vision.testing._vl_parity import compare_vision_language, random_images
from mobius_vision.vl_model import OnnxVisionLanguage

# A window shorter than the image runs (63 tokens each): it bounds the runs too.
BIDIRECTIONAL = dict(TEXT, use_bidirectional_attention="vision", sliding_window=16)


class WithTokenTypes:
    """The torch model, fed the processor's ``mm_token_type_ids`` with the images (prefill)."""

    def __init__(self, model, types: np.ndarray) -> None:
        self.model, self.config, self.types = model, model.config, torch.from_numpy(types)

    def forward(self, **feeds):
        if "pixel_values" in feeds:
            feeds["mm_token_type_ids"] = self.types
        return self.model(**feeds)

    __call__ = forward


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma4-bidirectional")
    config = gemma4_config(text=BIDIRECTIONAL)()
    model = make_random_vl_model(config)
    model.save_pretrained(root / "hf")
    sizes = OPTIONS["image_sizes"]
    images = [[random_images(1, size, i)[0]] for i, size in enumerate(sizes)]
    processor = gemma4_processor(config)
    inputs = dict(processor(text=list(OPTIONS["prompts"]), images=images, return_tensors="np"))
    return root, model, inputs


def test_image_tokens_attend_both_ways_on_sliding_layers(case):
    root, model, inputs = case
    types = inputs.pop("mm_token_type_ids")
    feeds = {k: torch.from_numpy(v) for k, v in inputs.items()}
    with torch.no_grad():  # the test can fail: the token types change transformers' logits
        causal = model(**feeds).logits
        both_ways = model(**feeds, mm_token_type_ids=torch.from_numpy(types)).logits
    assert (causal - both_ways).abs().max() > 1e-2
    for form in ("split", "single"):
        for ep in ("default", "cpu"):
            out = build_with_cli(root / "hf", root / f"{form}-{ep}", "--ep", ep, "--form", form)
            result = compare_vision_language(
                WithTokenTypes(model, types), OnnxVisionLanguage(out), inputs
            )
            result.ep = f"{ep} --form {form}"
            result.assert_close(PARITY_ATOL)
