"""``mobius build --model file.gguf --runtime ort-genai``: a package that runs on its own.

SmolLM2-135M-Instruct is built straight from its ``.gguf`` file; the prompt is
tokenized by onnxruntime-genai's tokenizer from the package's own tokenizer files
(made from the GGUF metadata), and the generator's greedy tokens must equal
transformers' ``generate`` on the same GGUF file.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from mobius.testing import build_with_cli, genai_greedy, torch_greedy
from mobius_text.testing import smollm2_gguf

if sys.version_info < (3, 11):
    # Not a dev dependency there: onnxruntime-genai 0.18 needs onnxruntime >= 1.31,
    # which ships no Python 3.10 wheels.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

import onnxruntime_genai as og  # noqa: E402

PROMPT = "The capital of France is"
NEW_TOKENS = 32


@pytest.mark.slow  # dequantizing the GGUF twice (ours, transformers') and a 135M build
def test_smollm2_gguf_package_tokenizes_and_generates_like_pytorch(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    # The file's blocks, computed exactly (the default int8 activations, like llama.cpp's,
    # drift from PyTorch after about 20 tokens).
    out = build_with_cli(
        gguf, tmp_path / "out", "--ep", "cpu", "--runtime", "ort-genai", "--accuracy-level", "0"
    )
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (out / name).is_file(), name
    # Every id llama.cpp ends generation at: <|im_end|>, <reponame> (FIM), <|endoftext|>.
    eos = json.loads((out / "genai_config.json").read_text())["model"]["eos_token_id"]
    assert eos == [2, 4, 0]

    model = og.Model(og.Config(str(out)))
    tokenizer = og.Tokenizer(model)
    prompt = [int(t) for t in tokenizer.encode(PROMPT)]
    reference_tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert prompt == reference_tokenizer(PROMPT)["input_ids"]

    reference = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    ).eval()
    reference.generation_config.eos_token_id = eos  # suppressed as the generator does
    expected = torch_greedy(reference, prompt, NEW_TOKENS, eos="suppress")
    del reference
    assert genai_greedy(model, prompt, NEW_TOKENS) == expected
    # The package's own tokenizer decodes the answer; a real answer, not a broken cache.
    assert "Paris" in tokenizer.decode(np.array(expected, dtype=np.int32))
    assert len(set(expected)) > 3
