"""mobius-text's test kit: real and hand-written checkpoints of its families (test-only).

- a tiny Llama written with numpy alone (:func:`write_tiny_llama`), for tests that
  must not need torch;
- SmolLM2-135M-Instruct, the real checkpoint of the end-to-end tests, as a GGUF
  file (:func:`smollm2_gguf`) or an HF folder (:func:`write_smollm2_checkpoint`);
- small GGUF files written with the ``gguf`` package (:func:`write_gguf`), and an HF
  folder converted as llama.cpp's converter would (:func:`convert_to_gguf`).

The parity kits of the contracts core owns (causal LM, seq2seq, feature
extraction) stay in :mod:`mobius.testing`.
"""

from mobius_text.testing._checkpoints import (
    TINY_LLAMA_CONFIG,
    tiny_llama_shapes,
    tiny_llama_tensors,
    write_tiny_llama,
)
from mobius_text.testing._convert import convert_to_gguf
from mobius_text.testing._gguf import BLOCK_TYPE_NAMES, random_blocks, write_gguf
from mobius_text.testing._smollm2 import SMOLLM2_GGUF, smollm2_gguf, write_smollm2_checkpoint

__all__ = [
    "BLOCK_TYPE_NAMES",
    "random_blocks",
    "SMOLLM2_GGUF",
    "TINY_LLAMA_CONFIG",
    "convert_to_gguf",
    "smollm2_gguf",
    "tiny_llama_shapes",
    "tiny_llama_tensors",
    "write_gguf",
    "write_smollm2_checkpoint",
    "write_tiny_llama",
]
