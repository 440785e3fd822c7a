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
from mobius.components._budget import CONSTANT_BUDGET, check_constant_size
from mobius.components._compose import embeddings_given, merge_image_features, module_path
from mobius.components._conv import BatchNorm, Conv2d, Conv3d, GroupNorm
from mobius.components._cross_attention import CrossAttention, Seq2SeqAttention
from mobius.components._decoder import DecoderLayer
from mobius.components._disentangled import (
    DisentangledSelfAttention,
    RelativeEmbeddings,
    c2p_scores,
    float_constant,
    gather_by_distance,
    log_bucket_positions,
    masked_softmax_attention,
    p2c_scores,
    positions_as_keys,
    relative_positions,
    sequence_length,
)
from mobius.components._encoder import (
    bidirectional_attention,
    causal_bias,
    last_real_token,
    padding_bias,
    pool_tokens,
)
from mobius.components._heads import merge_heads, split_heads
from mobius.components._linear import (
    Embedding,
    Linear,
    TiedLMHead,
    TransposedParameter,
    checkpoint_shape,
)
from mobius.components._mlp import MLP, GatedMLP
from mobius.components._norms import LayerNorm, RMSNorm, WeightlessRMSNorm
from mobius.components._qformer import (
    Blip2QFormerModel,
    InstructBlipQFormerModel,
    QFormerConfig,
    QFormerIntermediate,
    QFormerOutput,
)
from mobius.components._rope import (
    DynamicNTKRotaryEmbedding,
    LongRopeRotaryEmbedding,
    RotaryEmbedding,
    apply_rotary,
    default_inv_freq,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.components._runtime import EXECUTION_PROVIDERS, execution_provider_of, fused_ops
from mobius.components._scan import scan_body
from mobius.components._scope import module_scope, realize_parameters

__all__ = [
    "ACTIVATIONS",
    "CONSTANT_BUDGET",
    "check_constant_size",
    "default_inv_freq",
    "embeddings_given",
    "EXECUTION_PROVIDERS",
    "MLP",
    "Attention",
    "Blip2QFormerModel",
    "BatchNorm",
    "Conv2d",
    "Conv3d",
    "CrossAttention",
    "DecoderLayer",
    "DisentangledSelfAttention",
    "DynamicNTKRotaryEmbedding",
    "Embedding",
    "GatedMLP",
    "GroupNorm",
    "InstructBlipQFormerModel",
    "LayerNorm",
    "Linear",
    "LongRopeRotaryEmbedding",
    "QFormerConfig",
    "QFormerIntermediate",
    "QFormerOutput",
    "RMSNorm",
    "RelativeEmbeddings",
    "RotaryEmbedding",
    "Seq2SeqAttention",
    "TiedLMHead",
    "TransposedParameter",
    "WeightlessRMSNorm",
    "apply_rotary",
    "attention_bias",
    "bidirectional_attention",
    "bidirectional_blocks",
    "c2p_scores",
    "causal_bias",
    "checkpoint_shape",
    "execution_provider_of",
    "float_constant",
    "fused_ops",
    "gather_by_distance",
    "get_activation",
    "last_real_token",
    "log_bucket_positions",
    "lowest_value",
    "make_rotary_embedding",
    "masked_softmax_attention",
    "merge_heads",
    "merge_image_features",
    "module_path",
    "module_scope",
    "p2c_scores",
    "padding_bias",
    "pool_tokens",
    "positions_as_keys",
    "realize_parameters",
    "relative_positions",
    "repeat_kv",
    "rotary_dim",
    "scaled_dot_product_attention",
    "scan_body",
    "sequence_length",
    "softcap",
    "split_heads",
]
