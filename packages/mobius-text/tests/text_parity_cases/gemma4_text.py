"""Gemma 4 (text, dense): per-layer head sizes, k-equals-v full layers, proportional
RoPE, KV sharing with double-wide MLPs, per-layer input embeddings, layer scalars.

Five layers (sliding, full, sliding | sliding, full): full layers have head_dim 32
and one kv head, sliding ones head_dim 16 and two; the last two layers share the
K/V of layers 2 and 1; the window of 4 is shorter than the test sequence.
"""

ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    "full_attention": {
        "rope_type": "proportional",
        "partial_rotary_factor": 0.25,
        "rope_theta": 10_000.0,
    },
}
GEMMA4 = dict(
    head_dim=16,
    global_head_dim=32,
    num_global_key_value_heads=1,
    num_hidden_layers=5,
    layer_types=[
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ],
    sliding_window=4,
    rope_parameters=ROPE,
    num_kv_shared_layers=2,
    hidden_size_per_layer_input=16,
    vocab_size_per_layer_input=128,
)

CASES = {
    "gemma4-text": (
        "gemma4_text",
        dict(
            GEMMA4,
            attention_k_eq_v=True,
            use_double_wide_mlp=True,
            initializer_range=0.2,
            final_logit_softcapping=3.0,
        ),
    ),
    # Separate v_proj, no sharing, no per-layer inputs, untied and biased, linear-scaled
    # proportional RoPE.
    "gemma4-text-untied-plain": (
        "gemma4_text",
        dict(
            GEMMA4,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": 0.5,
                    "factor": 2.0,
                    "rope_theta": 1_000.0,
                },
            },
            num_kv_shared_layers=0,
            hidden_size_per_layer_input=0,
            tie_word_embeddings=False,
            attention_bias=True,
        ),
    ),
}
