"""Jina Embeddings v3's task LoRA: ``--adapter <checkpoint>/<task>`` merged equals transformers
with that PEFT adapter set (``load_adapter`` + ``set_adapter``: one task for every row).

The adapter is made with peft on transformers' module names (``layers.N.self_attn.q_proj``...)
over a checkpoint saved in Jina's layout (fused ``mixer.Wqkv``): the merge reads the converted
layout. Needs torch and peft (test dependencies).
"""

from __future__ import annotations

import numpy as np
import pytest
from encoder_parity_cases import TINY

from mobius.testing import build_with_cli, perturb_parameters

pytest.importorskip("peft", reason="peft makes the reference adapter (a test dependency)")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"]


@pytest.mark.parametrize("model_class", ["JinaEmbeddingsV3Model", "JinaEmbeddingsV3ForMaskedLM"])
def test_task_adapter_merged_equals_peft(tmp_path, model_class):
    import onnxruntime as ort
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    config = transformers.AutoConfig.for_model("jina_embeddings_v3", **{**TINY, "pad_token_id": 1})
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    perturb_parameters(model, 0)
    model.save_pretrained(tmp_path / "jina")  # Jina's layout: emb_ln, encoder.layers...mixer.Wqkv
    lora = LoraConfig(r=2, lora_alpha=4, lora_dropout=0.0, target_modules=TARGETS)
    peft_model = get_peft_model(model, lora).eval()
    for name, tensor in peft_model.named_parameters():
        if "lora_" in name:  # lora_B starts at zero: give both sides values
            torch.nn.init.normal_(tensor, std=0.2)
    peft_model.save_pretrained(tmp_path / "jina" / "retrieval_query")

    head = "masked-lm" if model_class.endswith("MaskedLM") else "none"
    out = build_with_cli(
        tmp_path / "jina", tmp_path / "onnx", "--head", head,
        "--adapter", str(tmp_path / "jina" / "retrieval_query"),
    )  # fmt: skip
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([[5, 9, 17, 33, 8, 41, 12], [7, 64, 23, 9, 1, 1, 1]], np.int64)
    mask = (ids != 1).astype(np.int64)
    got = dict(
        zip(
            [o.name for o in session.get_outputs()],
            session.run(None, {"input_ids": ids, "attention_mask": mask}),
            strict=True,
        )
    )
    with torch.no_grad():
        reference = peft_model(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
        )
        base = peft_model.base_model.model
        hidden = getattr(base, "roberta", base)(torch.from_numpy(ids), torch.from_numpy(mask))
        with peft_model.disable_adapter():  # the adapter matters: without it, far off
            plain = getattr(base, "roberta", base)(torch.from_numpy(ids), torch.from_numpy(mask))
    real = mask.astype(bool)
    expected = hidden.last_hidden_state.numpy()
    assert np.abs(plain.last_hidden_state.numpy() - expected)[real].max() > 1e-2
    diff = np.abs(got["last_hidden_state"] - expected)[real].max()
    assert diff <= 1e-4, diff
    if head == "masked-lm":
        diff = np.abs(got["logits"] - reference.logits.numpy())[real].max()
        assert diff <= 1e-4, diff
