"""Llama 4 text: chunked local attention on RoPE layers, NoPE global layers with temperature
tuning, L2 qk-norm, and MoE layers (shared + sigmoid-routed experts) interleaved with dense ones.

The chunk (4) is shorter than the 15-token test sequence and the left padding of the
batch-2 row (3) is not a multiple of it, so chunk boundaries depend on the padding;
``floor_scale`` 2 makes the temperature change every other token.
"""

LLAMA4 = dict(
    head_dim=16,
    intermediate_size_mlp=96,
    num_local_experts=4,
    attention_chunk_size=4,
    no_rope_layer_interval=2,  # layers 0, 2: RoPE + chunked; 1, 3: NoPE + full
    floor_scale=2,
    attn_scale=0.5,
    num_hidden_layers=4,
)

CASES = {
    # MoE every other layer (1, 3), top-1 routing.
    "llama4_text": ("llama4_text", dict(LLAMA4, interleave_moe_layer_step=2)),
    # Every layer MoE, top-2, biased attention, MHA, llama3 rope scaling, tied head.
    "llama4_text-top2-bias": (
        "llama4_text",
        dict(
            LLAMA4,
            num_experts_per_tok=2,
            num_key_value_heads=4,
            attention_bias=True,
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
    ),
    # The 128-expert layout: no qk-norm, no temperature tuning.
    "llama4_text-plain": (
        "llama4_text",
        dict(LLAMA4, use_qk_norm=False, attn_temperature_tuning=False, interleave_moe_layer_step=2),
    ),
}
