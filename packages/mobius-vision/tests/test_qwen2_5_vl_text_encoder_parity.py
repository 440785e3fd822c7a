"""Qwen2.5-VL's base model as an image-text encoder (``--model-type Qwen2_5_VLModel``, Qwen-Image
Edit's text encoder) against transformers' ``Qwen2_5_VLModel`` (the ``.model`` of the saved
``Qwen2_5_VLForConditionalGeneration``, every parameter perturbed).

Two prompts, each with an image of another size (the 37x45 one has windows cut short at
the grid's edges; one block attends fully), the shorter prompt padded on the right and on the left; the
processor is transformers' own (its PIL backend) and the positions its model's
``get_rope_index``. ``last_hidden_state`` and ``hidden_states.{i}`` agree at the real tokens
within 1e-4, built for ``--ep default`` and ``--ep cpu``.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from vl_parity_cases.qwen2_5_vl import qwen2_5_vl_config, qwen2_5_vl_processor
from vl_parity_cases.qwen2_vl import IMG, rope_positions

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters

PROMPTS = [f"USER: {IMG} w11 w7 w9 w3 ASSISTANT:", f"USER: w8 {IMG} w2"]
IMAGE_SIZES = ((37, 45), (29, 21))  # (height, width): 40x48 and 32x24 after resizing


@pytest.fixture(scope="module")
def qwen2_5_vl(tmp_path_factory):
    """(transformers model, processor, saved folder)."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    config = qwen2_5_vl_config()()
    model = Qwen2_5_VLForConditionalGeneration._from_config(config, attn_implementation="eager")
    perturb_parameters(model, seed=3)
    model = model.float().eval()
    path = tmp_path_factory.mktemp("qwen2_5_vl") / "hf"
    model.save_pretrained(path)
    return model, qwen2_5_vl_processor(config), path


def _inputs(processor, side: str):
    rng = np.random.default_rng(0)
    images = [
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SIZES
    ]
    processor.tokenizer.padding_side = side
    inputs = processor(text=PROMPTS, images=images, padding=True, return_tensors="np")
    assert not inputs["attention_mask"].all()
    return {k: np.asarray(v) for k, v in inputs.items()}


#: The support table's cases: by --ep, the registry key each verifies.
CASES = {"default": ("Qwen2_5_VLModel",), "cpu": ("Qwen2_5_VLModel",)}


@pytest.mark.parametrize("ep", sorted(CASES))
def test_qwen2_5_vl_image_text_encoder_parity(qwen2_5_vl, tmp_path, ep):
    import onnxruntime as ort

    model, processor, path = qwen2_5_vl
    out = build_with_cli(
        path, tmp_path / "onnx", "--model-type", "Qwen2_5_VLModel", "--ep", ep,
        "--hidden-states", "0,1",
    )  # fmt: skip
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    for side in ("right", "left"):
        _compare(model, session, _inputs(processor, side), f"{ep} {side}")


def _compare(model, session, inputs, label):
    import torch

    positions, _ = rope_positions(model, inputs)
    names = ["input_ids", "attention_mask", "pixel_values", "image_grid_thw"]
    feeds = {name: inputs[name] for name in names}
    feeds["pixel_values"] = feeds["pixel_values"].astype(np.float32)
    outputs = ["last_hidden_state", "hidden_states.0", "hidden_states.1"]
    got = dict(zip(outputs, session.run(outputs, dict(feeds, position_ids=positions)), strict=True))
    with torch.no_grad():
        expected = model.model(  # its own 3-D positions, from the processor's token types
            **{name: torch.from_numpy(value) for name, value in feeds.items()},
            mm_token_type_ids=torch.from_numpy(inputs["mm_token_type_ids"]),
            output_hidden_states=True,
        )
    real = inputs["attention_mask"].astype(bool)
    references = {
        "last_hidden_state": expected.last_hidden_state,
        "hidden_states.0": expected.hidden_states[0],
        "hidden_states.1": expected.hidden_states[1],
    }
    diffs = {}
    for name, reference in references.items():
        reference = reference.numpy()[real]
        scale = max(1.0, float(np.abs(reference).max()))
        diffs[name] = float(np.abs(got[name][real] - reference).max()) / scale
    print(label, "max abs diff (over the output scale)", diffs)
    assert max(diffs.values()) <= PARITY_ATOL, (label, diffs)
