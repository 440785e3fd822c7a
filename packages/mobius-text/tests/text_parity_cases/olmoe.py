"""OLMoE: 8 experts, top-2; clip_qkv small enough that the clamp changes q, k and v."""

MOE = dict(num_experts=8, num_experts_per_tok=2, eos_token_id=2)

CASES = {
    "olmoe": ("olmoe", dict(**MOE)),
    "olmoe-clip-norm-bias": (
        "olmoe",
        dict(**MOE, clip_qkv=0.3, norm_topk_prob=True, attention_bias=True),
    ),
}
