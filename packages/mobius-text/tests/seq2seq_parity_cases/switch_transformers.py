"""Switch Transformers: T5 with top-1 expert blocks; one case small enough in capacity to drop tokens."""

SWITCH = dict(
    vocab_size=99,
    d_model=32,
    d_kv=8,
    d_ff=37,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    num_experts=4,
    num_sparse_encoder_layers=1,  # sparse step 2: block 0 dense, block 1 sparse
    num_sparse_decoder_layers=1,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=2,  # seed 0 greedily picks token 1: generate would refuse it (min_new_tokens)
)

CASES = {
    "switch_transformers": ("switch_transformers", SWITCH),
    # Every block sparse (step 1); an expert takes at most one token of a sequence, so
    # the 7- and 4-token sources and the 2-token prefill drop tokens. A router bias.
    "switch_transformers-capacity": (
        "switch_transformers",
        dict(
            SWITCH,
            num_sparse_encoder_layers=2,
            num_sparse_decoder_layers=2,
            expert_capacity=1,
            router_bias=True,
        ),
    ),
}
