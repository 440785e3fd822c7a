"""Synthetic parity of the zero-shot image–text types (CLIP, SigLIP, SigLIP 2) against PyTorch.

Each case makes a tiny random ``CLIPModel`` / ``SiglipModel`` / ``Siglip2Model``
with every parameter perturbed, builds it with the CLI path, and checks
``logits_per_image``, ``logits_per_text``, ``text_embeds`` and ``image_embeds`` at
fp32 on three texts of different lengths and two random images (max abs diff
<= 1e-4), for ``--ep default`` and ``cpu``. SigLIP 2's vision tower, which
PyTorch feeds with NaFlex patches (the vision kit feeds whole images), is
checked here too, at its native square grid.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from transformers import AutoConfig

from mobius.testing import build_with_cli
from mobius_vision.testing import check_zero_shot_parity, make_random_vision_model, naflex_inputs
from mobius_vision.testing._vision_parity import _assert_depends_on_image

TEXT = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=16,
    pad_token_id=1,
    bos_token_id=1,
    eos_token_id=3,
)
VISION = dict(
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
)

# SigLIP 2 has no image_size: a 4x4 grid of patches, 16x16 pixels.
SIGLIP2_VISION = dict({k: v for k, v in VISION.items() if k != "image_size"}, num_patches=16)

#: case name -> (model_type, config overrides, keyword arguments of check_zero_shot_parity).
ZERO_SHOT_CASES = {
    # CLIP's tokenizer ends each text with its end token and pads with it.
    "clip": (
        "clip",
        dict(text_config=TEXT, vision_config=VISION, projection_dim=8),
        dict(end_token_id=3, pad_token_id=3),
    ),
    # The legacy eos_token_id 2: the largest id of each text is pooled.
    "clip-legacy-eos-gelu": (
        "clip",
        dict(
            text_config=dict(TEXT, eos_token_id=2, hidden_act="gelu"),
            vision_config=dict(VISION, hidden_act="gelu", image_size=20, num_channels=4),
            projection_dim=12,
            logit_scale_init_value=1.5,
        ),
        dict(end_token_id=98, pad_token_id=0),
    ),
    # SigLIP's texts are padded to a fixed length with pad tokens and read without a mask.
    "siglip": (
        "siglip",
        dict(text_config=dict(TEXT, projection_size=24), vision_config=VISION),
        dict(lengths=(8, 5, 3), pad_token_id=1),
    ),
    # A fixed length with no padding, as the original SigLIP reads its texts.
    "siglip-relu-3-layers": (
        "siglip",
        dict(
            text_config=dict(TEXT, projection_size=24, hidden_act="relu", num_hidden_layers=3),
            vision_config=dict(VISION, num_hidden_layers=3, image_size=20),
        ),
        dict(lengths=(6, 6, 6)),
    ),
    "siglip2": (
        "siglip2",
        dict(
            text_config=dict(TEXT, projection_size=24),
            vision_config=SIGLIP2_VISION,
        ),
        dict(lengths=(8, 5, 3), pad_token_id=1, naflex_patch_size=4),
    ),
}


#: SigLIP 2's vision tower: case name -> (model_type, config overrides); square images.
NAFLEX_VISION_CASES = {
    "siglip2_vision_model": ("siglip2_vision_model", SIGLIP2_VISION),
    "siglip2_vision_model-no-head-gelu-5x5": (
        "siglip2_vision_model",
        dict(
            SIGLIP2_VISION, num_patches=25, vision_use_head=False, hidden_act="gelu", num_channels=4
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(ZERO_SHOT_CASES))
def test_zero_shot_parity(case, tmp_path):
    model_type, overrides, options = ZERO_SHOT_CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_zero_shot_parity(hf_config, tmp_path, **options)
    assert results and all(r.diffs for r in results)


@pytest.mark.parametrize("case", sorted(NAFLEX_VISION_CASES))
def test_siglip2_vision_parity(case, tmp_path):
    """The graph's square images against PyTorch's patches of them: both outputs, both eps."""
    model_type, overrides = NAFLEX_VISION_CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    torch_model = make_random_vision_model(hf_config, "none")
    torch_model.save_pretrained(tmp_path / "hf")
    patch, side = hf_config.patch_size, int(hf_config.num_patches**0.5) * hf_config.patch_size
    rng = np.random.default_rng(0)
    pixels = rng.standard_normal((2, hf_config.num_channels, side, side)).astype(np.float32)
    with torch.no_grad():
        out = torch_model(**naflex_inputs(pixels, patch))
    for ep in ("default", "cpu"):
        path = build_with_cli(tmp_path / "hf", tmp_path / f"onnx-{ep}", "--ep", ep) / "model.onnx"
        if ep == "default":
            onnx.checker.check_model(str(path), full_check=True)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(None, {"pixel_values": pixels}), strict=True))
        expected = {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output}
        expected = {k: v.numpy() for k, v in expected.items() if v is not None}
        assert set(got) == set(expected), f"--ep {ep}: outputs {sorted(got)}"
        diffs = {}
        for name, reference in expected.items():
            _assert_depends_on_image(name, reference)
            diffs[name] = float(np.abs(got[name] - reference).max())
        assert max(diffs.values()) <= 1e-4, f"--ep {ep}: {diffs}"
