"""The weight pipeline: resolve a model, read its checkpoint lazily, apply it strictly."""

from mobius.weights._apply import DerivedTensor, apply_weights, parameters, rename_prefixes
from mobius.weights._closing import Closing
from mobius.weights._gguf import GGUFFile, GGUFMetadata, GGUFTensor
from mobius.weights._gguf_quant import REPACKABLE, RepackedWeight
from mobius.weights._open import open_checkpoint
from mobius.weights._resolve import resolve_model
from mobius.weights._safetensors import CheckpointTensor, SafetensorsCheckpoint, checkpoint_dtype

__all__ = [
    "REPACKABLE",
    "CheckpointTensor",
    "Closing",
    "DerivedTensor",
    "GGUFFile",
    "GGUFMetadata",
    "GGUFTensor",
    "RepackedWeight",
    "SafetensorsCheckpoint",
    "apply_weights",
    "checkpoint_dtype",
    "open_checkpoint",
    "parameters",
    "rename_prefixes",
    "resolve_model",
]
