"""Building blocks shared by more than one model family. Each takes explicit arguments."""

from mobius.components._activations import ACTIVATIONS, get_activation
from mobius.components._attention import Attention, attention_bias, lowest_value
from mobius.components._decoder import DecoderLayer
from mobius.components._linear import (
    Embedding,
    Linear,
    TiedLMHead,
    TransposedParameter,
    checkpoint_shape,
)
from mobius.components._mlp import MLP, GatedMLP
from mobius.components._norms import LayerNorm, RMSNorm
from mobius.components._rope import (
    DynamicNTKRotaryEmbedding,
    LongRopeRotaryEmbedding,
    RotaryEmbedding,
    apply_rotary,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.components._scan import scan_body

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "Attention",
    "DecoderLayer",
    "DynamicNTKRotaryEmbedding",
    "Embedding",
    "GatedMLP",
    "LayerNorm",
    "Linear",
    "LongRopeRotaryEmbedding",
    "RMSNorm",
    "RotaryEmbedding",
    "TiedLMHead",
    "TransposedParameter",
    "apply_rotary",
    "attention_bias",
    "checkpoint_shape",
    "get_activation",
    "lowest_value",
    "make_rotary_embedding",
    "rotary_dim",
    "scan_body",
]
