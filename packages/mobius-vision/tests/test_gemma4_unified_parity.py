"""Gemma 4 unified against PyTorch: images and audio, a batch of two.

- The case of ``omni_parity_cases_gemma4_unified.py`` (a causal decoder) through the
  shared kit (``check_audio_vision_language_parity``). It is collected here, not in
  ``omni_parity_cases.CASES``, whose generate tests are written for the Qwen Omni cases.
- The config's default ``use_bidirectional_attention="vision"``: each run of image
  tokens attends both ways on every layer. transformers reads the runs off the processor's ``mm_token_type_ids`` at prefill, which
the shared kit does not pass, so the torch model is wrapped to take them with the
images (as in ``test_gemma4_bidirectional_parity.py``); then the kit's comparison runs
as usual over the case of ``omni_parity_cases_gemma4_unified.py`` (images and audio, a
batch of two): both forms, both eps, prefill and 8 cached decode steps, 1e-4. The window
(8) is shorter than the image runs (63 tokens), which stay visible whole, as in
transformers.
"""

from __future__ import annotations

import pytest
import torch
from omni_parity_cases_gemma4_unified import CASES, OPTIONS, TEXT, gemma4_unified_config
from omni_parity_cases_gemma4_unified import gemma4_unified_processor as make_processor
from test_gemma4_bidirectional_parity import WithTokenTypes

from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_vision.testing import check_audio_vision_language_parity
from mobius_vision.testing._omni_parity import as_model_inputs, make_random_model, random_clips
from mobius_vision.testing._vl_parity import compare_vision_language, random_images
from mobius_vision.vl_model import OnnxVisionLanguage


@pytest.mark.parametrize("case", sorted(CASES))
def test_audio_vision_language_parity(case, tmp_path):
    _model_type, make_config, make_processor, options = CASES[case]
    config = make_config()
    results = check_audio_vision_language_parity(
        config, make_processor(config), tmp_path, **options
    )
    assert len(results) == 4


@pytest.fixture(scope="module")
def bidirectional(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma4-unified-bidirectional")
    config = gemma4_unified_config(dict(TEXT, use_bidirectional_attention="vision"))()
    model = make_random_model(config, OPTIONS["model_class"])
    model.save_pretrained(root / "hf")
    images = [random_images(1, size, i)[0] for i, size in enumerate(OPTIONS["image_sizes"])]
    clips = random_clips(OPTIONS["clip_lengths"], 0)
    batch = make_processor(config)(
        text=list(OPTIONS["prompts"]), images=images, audio=clips, return_tensors="np"
    )
    return root, model, as_model_inputs(batch)


def test_image_tokens_attend_both_ways(bidirectional):
    root, model, inputs = bidirectional
    types = inputs.pop("mm_token_type_ids")
    feeds = {k: torch.from_numpy(v) for k, v in inputs.items()}
    feeds["input_features_mask"] = feeds["input_features_mask"].bool()
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
