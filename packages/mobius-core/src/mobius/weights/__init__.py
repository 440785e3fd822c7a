"""The weight pipeline: resolve a model, read its checkpoint lazily, apply it strictly."""

from mobius.weights._apply import DerivedTensor, apply_weights, parameters
from mobius.weights._resolve import resolve_model
from mobius.weights._safetensors import CheckpointTensor, SafetensorsCheckpoint, checkpoint_dtype

__all__ = [
    "CheckpointTensor",
    "DerivedTensor",
    "SafetensorsCheckpoint",
    "apply_weights",
    "checkpoint_dtype",
    "parameters",
    "resolve_model",
]
