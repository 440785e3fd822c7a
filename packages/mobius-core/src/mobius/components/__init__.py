"""Building blocks shared by more than one model family. Each takes explicit arguments."""

from mobius.components._activations import ACTIVATIONS, get_activation, softcap
from mobius.components._attention import (
    Attention,
    attention_bias,
    bidirectional_blocks,
    lowest_value,
    repeat_kv,
    scaled_dot_product_attention,
)
from mobius.components._conv import Conv2d, Conv3d, GroupNorm
from mobius.components._decoder import DecoderLayer
from mobius.components._encoder import (
    bidirectional_attention,
    causal_bias,
    padding_bias,
    pool_tokens,
)
from mobius.components._linear import (
    Embedding,
    Linear,
    TiedLMHead,
    TransposedParameter,
    checkpoint_shape,
)
from mobius.components._mlp import MLP, GatedMLP
from mobius.components._multimodal import embeddings_given, merge_image_features
from mobius.components._norms import LayerNorm, RMSNorm, WeightlessRMSNorm
from mobius.components._rope import (
    DynamicNTKRotaryEmbedding,
    LongRopeRotaryEmbedding,
    RotaryEmbedding,
    apply_rotary,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.components._runtime import EXECUTION_PROVIDERS, execution_provider, fused_ops
from mobius.components._scan import scan_body
from mobius.components._scope import module_scope, realize_parameters

__all__ = [
    "ACTIVATIONS",
    "EXECUTION_PROVIDERS",
    "MLP",
    "Attention",
    "Conv2d",
    "Conv3d",
    "DecoderLayer",
    "DynamicNTKRotaryEmbedding",
    "Embedding",
    "GatedMLP",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "LongRopeRotaryEmbedding",
    "RMSNorm",
    "RotaryEmbedding",
    "TiedLMHead",
    "TransposedParameter",
    "WeightlessRMSNorm",
    "apply_rotary",
    "attention_bias",
    "bidirectional_attention",
    "bidirectional_blocks",
    "causal_bias",
    "checkpoint_shape",
    "embeddings_given",
    "execution_provider",
    "fused_ops",
    "get_activation",
    "lowest_value",
    "make_rotary_embedding",
    "merge_image_features",
    "module_scope",
    "padding_bias",
    "pool_tokens",
    "realize_parameters",
    "repeat_kv",
    "rotary_dim",
    "scaled_dot_product_attention",
    "scan_body",
    "softcap",
]
