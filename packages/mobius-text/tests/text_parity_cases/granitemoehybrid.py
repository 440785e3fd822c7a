"""Granite-MoE-Hybrid: Mamba-2 and attention layers, routed experts + shared MLP, µP multipliers;
chunk size 4 so PyTorch's prefill spans several SSD chunks."""

HYBRID = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    mamba_n_heads=8,
    mamba_d_head=16,
    mamba_n_groups=2,
    mamba_d_state=8,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_chunk_size=4,
    shared_intermediate_size=96,
    embedding_multiplier=3.0,
    residual_multiplier=0.5,
    attention_multiplier=0.2,
    logits_scaling=2.5,
)

CASES = {
    "granitemoehybrid": (
        "granitemoehybrid",
        dict(HYBRID, num_local_experts=4, num_experts_per_tok=2, position_embedding_type="rope"),
    ),
    "granitemoehybrid-dense-nope-tied-biases": (
        "granitemoehybrid",
        dict(
            HYBRID,
            num_local_experts=0,
            position_embedding_type=None,
            tie_word_embeddings=True,
            attention_bias=True,
            mamba_proj_bias=True,
            time_step_limit=(0.2, 1.0),
        ),
    ),
}
