"""Bamba: Mamba-2 layers with one attention layer; chunk size 4 so PyTorch's prefill spans chunks."""

HYBRID = dict(
    num_hidden_layers=3,
    attn_layer_indices=[1],
    mamba_n_heads=8,
    mamba_d_head=16,
    mamba_n_groups=2,
    mamba_d_state=8,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_chunk_size=4,
)

CASES = {
    "bamba": ("bamba", HYBRID),
    "bamba-biases": ("bamba", dict(HYBRID, mamba_proj_bias=True, attention_bias=True)),
}
