"""Zamba2: three hybrid layers over two shared blocks (so one block is reused with its own adapter),
chunk size 4 so PyTorch's prefill spans several SSD chunks."""

MAMBA = dict(
    mamba_d_state=8,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_ngroups=2,
    n_mamba_heads=8,
    chunk_size=4,
)
LAYERS = dict(
    num_hidden_layers=5,
    layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
)

CASES = {
    "zamba2": (
        "zamba2",
        dict(
            MAMBA,
            **LAYERS,
            num_mem_blocks=2,
            use_shared_attention_adapter=True,
            adapter_rank=8,
            num_key_value_heads=4,  # q/k/v adapters are 2*hidden wide: no grouped KV with them
            time_step_min=0.3,  # prefill clamps dt from below: make the clamp bite
        ),
    ),
    # Untied embeddings: transformers then keeps a separate block per hybrid layer.
    "zamba2-untied-adapters": (
        "zamba2",
        dict(
            MAMBA,
            **LAYERS,
            num_mem_blocks=2,
            use_shared_attention_adapter=True,
            adapter_rank=8,
            num_key_value_heads=4,
            tie_word_embeddings=False,
        ),
    ),
    "zamba2-rope-untied-biases-gqa": (
        "zamba2",
        dict(
            MAMBA,
            **LAYERS,
            num_mem_blocks=1,
            use_mem_rope=True,
            tie_word_embeddings=False,
            add_bias_linear=True,
            adapter_rank=8,
            hidden_act="gelu_pytorch_tanh",
        ),
    ),
}
