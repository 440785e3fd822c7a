"""Nemotron-H: Mamba-2, attention and MLP blocks; time_step_min high enough that the prefill clamp bites."""

HYBRID = dict(
    num_hidden_layers=4,
    layers_block_type=["linear_attention", "mlp", "full_attention", "linear_attention"],
    head_dim=16,
    ssm_state_size=8,
    mamba_num_heads=8,
    mamba_head_dim=16,
    n_groups=2,
    chunk_size=4,
    time_step_min=0.05,
)

CASES = {
    "nemotron_h": ("nemotron_h", HYBRID),
    "nemotron_h-biases": ("nemotron_h", dict(HYBRID, use_bias=True, mlp_bias=True)),
}
