"""Qwen3.5 and Qwen3.5-MoE: Qwen3-VL's tower (no DeepStack) over the hybrid Qwen3.5 decoders.

The real ``Qwen3VLProcessor`` (the one Qwen3.5 checkpoints name) over
``Qwen2VLImageProcessorPil``: two image sizes in one batch, as for Qwen3-VL. The decoders
mix Gated DeltaNet layers (conv and recurrent states in the cache) with gated full
attention, whose rotary channels (a ``partial_rotary_factor`` of each head) take the
interleaved M-RoPE positions of the model's own ``get_rope_index``.
"""

from vl_parity_cases.qwen2_vl import OPTIONS, out_hidden_config
from vl_parity_cases.qwen3_vl import VISION as QWEN3_VL_VISION
from vl_parity_cases.qwen3_vl import qwen3_vl_processor

VISION = {k: v for k, v in QWEN3_VL_VISION.items() if k != "deepstack_visual_indexes"}
LINEAR = dict(
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
)
TEXT = dict(
    LINEAR,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    vocab_size=96,
    max_position_embeddings=256,
    # 16 of 32 channels rotate: 8 pairs, height on 1 and 4, width on 2, 5 and 7... (interleaved)
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [2, 3, 3],
    },
)
# transformers' defaults: partial_rotary_factor 0.25 and mrope_section [11, 11, 10] need
# head_dim 256; every MLP routed (top-2 of 4) beside a shared expert
MOE_TEXT = dict(
    LINEAR,
    hidden_size=32,
    num_hidden_layers=2,
    layer_types=["full_attention", "linear_attention"],
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=256,
    vocab_size=96,
    max_position_embeddings=256,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    shared_expert_intermediate_size=48,
)

CASES = {
    "qwen3_5-hybrid-two-sizes": (
        "qwen3_5",
        out_hidden_config("qwen3_5", VISION, TEXT),
        qwen3_vl_processor,
        OPTIONS,
    ),
    "qwen3_5_moe-default-rope-tied": (
        "qwen3_5_moe",
        out_hidden_config("qwen3_5_moe", VISION, MOE_TEXT, tie_word_embeddings=True),
        qwen3_vl_processor,
        OPTIONS,
    ),
}
