"""Jamba: mamba and attention layers alternating, MoE feed-forward on every other layer."""

HYBRID = dict(
    num_hidden_layers=4,
    num_experts=4,
    num_experts_per_tok=2,
    expert_layer_period=2,
    expert_layer_offset=1,
    attn_layer_period=2,
    attn_layer_offset=1,
    mamba_d_state=8,
    mamba_dt_rank=8,
)

CASES = {
    "jamba": ("jamba", HYBRID),
    "jamba-attention-first-biases": (
        "jamba",
        dict(HYBRID, attn_layer_offset=0, expert_layer_offset=0, mamba_proj_bias=True),
    ),
}
