"""MiMo-V2-Flash: layers full, sliding, sliding (window 4 under the 15-token test
sequence); the sliding layers have twice the KV heads and sink logits. Keys are 24
wide with a third rotated (8 channels), values 16 wide and scaled. Layer 0 dense,
then DeepSeek-V3 routing over 8 experts in 4 groups (2 kept, top-3)."""

MIMO = dict(
    num_hidden_layers=3,
    head_dim=24,
    v_head_dim=16,
    sliding_window=4,
    n_routed_experts=8,
    num_experts_per_tok=3,
    moe_intermediate_size=32,
    n_group=4,
    topk_group=2,
)

CASES = {
    "mimo_v2_flash": ("mimo_v2_flash", MIMO),
    "mimo_v2_flash-bias-scaled": (
        "mimo_v2_flash",
        dict(
            MIMO,
            attention_bias=True,
            routed_scaling_factor=2.0,
            norm_topk_prob=False,
            attention_value_scale=0.5,
            tie_word_embeddings=True,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            mlp_layer_types=["sparse", "sparse", "dense"],
        ),
    ),
}
