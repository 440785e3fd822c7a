"""Granite-MoE-SWA: fused experts, sinks, window 3 < the test sequence, per-layer RoPE incl. NoPE."""

from text_parity_cases.granite_swa import MULTIPLIERS

MOE = dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=32)

CASES = {
    # Default pattern (layer 0 full, layers 1-2 sliding), no shared expert.
    "granitemoe_swa": (
        "granitemoe_swa",
        dict(MULTIPLIERS, **MOE, num_hidden_layers=3, sliding_window=3),
    ),
    "granitemoe_swa-shared-nope-untied-bias": (
        "granitemoe_swa",
        dict(
            MULTIPLIERS,
            **MOE,
            num_hidden_layers=3,
            sliding_window=4,
            shared_intermediate_size=48,
            layer_rope_theta=[0, 10000.0, 500.0],
            tie_word_embeddings=False,
            attention_bias=True,
        ),
    ),
}
