"""LFM2-MoE: LFM2's conv/attention layers, a dense first layer, then sigmoid-routed experts."""

MOE = dict(
    num_hidden_layers=3,
    layer_types=["conv", "full_attention", "conv"],
    num_dense_layers=1,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    norm_eps=1e-5,
)

CASES = {
    # expert_bias (perturbed) moves the choice, not the weights; scores renormalised.
    "lfm2_moe": ("lfm2_moe", MOE),
    "lfm2_moe-no-bias-unnormalised-scaled": (
        "lfm2_moe",
        dict(MOE, use_expert_bias=False, norm_topk_prob=False, routed_scaling_factor=2.5),
    ),
}
