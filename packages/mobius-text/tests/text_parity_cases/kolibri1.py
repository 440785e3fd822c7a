"""Kolibri-1: sandwich norms, q/k norms, sliding + NoPE global layers, sigmoid-gated MoE."""

MOE = dict(
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    head_dim=16,
    sliding_window=4,  # smaller than the 15-token test
)

CASES = {
    "kolibri1": ("kolibri1", dict(**MOE, layer_types=["sliding_attention", "full_attention"])),
    "kolibri1-norm-topk": (
        "kolibri1",
        dict(**MOE, norm_topk_prob=True, layer_types=["full_attention", "sliding_attention"]),
    ),
}
