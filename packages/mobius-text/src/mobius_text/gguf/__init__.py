"""GGUF files (llama.cpp) as HuggingFace checkpoints of mobius-text's families.

Core reads the container (:class:`mobius.weights.GGUFFile`) and the block formats;
this package knows what llama.cpp's converter did to each family: its metadata
keys as an HF config (:func:`gguf_config`), its tensor names, permutations and
offsets (:class:`GGUFCheckpoint`), and its vocabulary as tokenizer files
(:func:`gguf_tokenizer_files`) with every end-of-generation id
(:func:`gguf_generation_config`). :func:`recognise` is the ``.gguf`` source
recogniser that mobius-text registers.
"""

from mobius_text.gguf._checkpoint import GGUFCheckpoint, GGUFWeight
from mobius_text.gguf._config import gguf_config
from mobius_text.gguf._source import recognise
from mobius_text.gguf._tokenizer import (
    UnsupportedTokenizerError,
    end_of_generation_ids,
    gguf_generation_config,
    gguf_tokenizer_files,
)

__all__ = [
    "GGUFCheckpoint",
    "GGUFWeight",
    "UnsupportedTokenizerError",
    "end_of_generation_ids",
    "gguf_config",
    "gguf_generation_config",
    "gguf_tokenizer_files",
    "recognise",
]
