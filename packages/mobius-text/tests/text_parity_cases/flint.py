"""Flint: sinks, RoPE only on sliding layers (window 4), 8 sigmoid-routed experts top-2.

Three layers: sliding (RoPE), full (NoPE), sliding; layer 1 keeps a dense MLP.
"""

BASE = dict(
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    shared_expert_intermediate_size=96,
    head_dim=16,
    sliding_window=4,
    eos_token_id=2,
)

CASES = {
    "flint": (
        "flint",
        dict(
            **BASE,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            mlp_only_layers=[1],
        ),
    ),
    "flint-raw-sigmoid-tied": (
        "flint",
        dict(
            **BASE,
            layer_types=["full_attention", "sliding_attention"],
            mlp_only_layers=[],
            norm_topk_prob=False,
            tie_word_embeddings=True,
        ),
    ),
}
