"""Synthetic parity of mobius-vision's text-prompted segmenters (CLIPSeg) against PyTorch.

Each case (see ``text_prompted_segmentation_parity_cases/``) makes a tiny random
``CLIPSegForImageSegmentation`` with every parameter perturbed, builds it with the CLI
(``--ep default`` and ``cpu``), and checks the text graph's ``conditional_embeddings`` and the
image graph's ``logits`` at fp32 on two random images and two prompts of different lengths
(max abs diff <= 1e-4, relative to the logits' scale above 1).
"""

from __future__ import annotations

import pytest
from text_prompted_segmentation_parity_cases import all_cases
from transformers import AutoConfig

from mobius.cli import main
from mobius_vision.testing._text_prompted_segmentation_parity import (
    check_text_prompted_segmentation_parity,
)

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_prompted_segmentation_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_text_prompted_segmentation_parity(
        hf_config, tmp_path, **(options[0] if options else {})
    )
    assert results and all(r.diffs for r in results)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(extract_layers=[0, 3]), "extract_layers [0, 3] must be vision layer indices"),
        (dict(conditional_layer=2), "conditional_layer 2 must be below the 2 decoder layers"),
        (dict(reduce_dim=15), "reduce_dim 15 is not a multiple of decoder_num_attention_heads"),
        (dict(architectures=["CLIPSegModel"]), "CLIPSegModel (CLIPSeg's towers without"),
    ],
)
def test_unusable_configs_are_refused(overrides, message, tmp_path, capsys):
    """A config the decoder cannot be built from is refused in one line, naming the field."""
    from text_prompted_segmentation_parity_cases.clipseg import TINY_CLIPSEG

    AutoConfig.for_model("clipseg", **{**TINY_CLIPSEG, **overrides}).save_pretrained(tmp_path)
    argv = ["build", "--model", str(tmp_path), str(tmp_path / "out"), "--no-weights"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_f16_build_loads_in_onnx_runtime(tmp_path):
    """The float16 graphs, the position table resized (a 48 px processor on a 32 px table),
    load in ONNX Runtime, which type-checks float constants meeting float16 values."""
    from test_f16_builds_load import _assert_f16_build_loads
    from text_prompted_segmentation_parity_cases.clipseg import TINY_CLIPSEG

    from mobius_vision.testing._text_prompted_segmentation_parity import save_image_processor

    save_image_processor(tmp_path / "hf", (48, 48))
    _assert_f16_build_loads(AutoConfig.for_model("clipseg", **TINY_CLIPSEG), tmp_path)
