"""Hy3: q/k-normed attention, layer 0 dense, then 8 sigmoid-routed experts (top-3, the
perturbed ``expert_bias`` steering the choice) scaled by ``router_scaling_factor``,
plus shared experts; biases on in the second case."""

HY_V3 = dict(
    head_dim=16,
    num_experts=8,
    num_experts_per_tok=3,
    num_shared_experts=2,
    moe_intermediate_size=32,
    router_scaling_factor=2.8,
)

CASES = {
    "hy_v3": ("hy_v3", HY_V3),
    "hy_v3-bias-all-sparse-tied": (
        "hy_v3",
        dict(
            HY_V3,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            num_shared_experts=1,
            mlp_layer_types=["sparse", "sparse"],
        ),
    ),
}
