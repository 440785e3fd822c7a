"""Falcon: each fused-QKV layout, sequential and parallel blocks, RoPE and ALiBi.

ALiBi (Falcon-RW) is checked against transformers' SDPA path. transformers' eager Falcon adds the ALiBi term twice:
once in the attention and once folded into the mask it builds for SDPA (0.27
logit difference from SDPA on this case; a graph with the term doubled matches
eager to 1e-6). The original Falcon-RW code, transformers' default SDPA path and
mobius add it once, so the ALiBi case compares with ``attn_implementation="sdpa"``.
"""

CASES = {
    # Falcon-7B: multi-query (one KV head), parallel attention + MLP, one LayerNorm, tied head.
    "falcon-7b-style": (
        "falcon",
        dict(multi_query=True, parallel_attn=True, new_decoder_architecture=False),
    ),
    # Old architecture, one KV head per query head, sequential blocks, biases, untied head.
    "falcon-mha-sequential-bias": (
        "falcon",
        dict(
            multi_query=False,
            parallel_attn=False,
            bias=True,
            tie_word_embeddings=False,
            ffn_hidden_size=96,
        ),
    ),
    # Falcon-40B: grouped KV heads laid out per group, ln_attn and ln_mlp.
    "falcon-new-arch-gqa": (
        "falcon",
        dict(new_decoder_architecture=True, num_kv_heads=2, bias=True),
    ),
    # Falcon2-11B: new architecture with a single LayerNorm, multi-query.
    "falcon-new-arch-one-ln": (
        "falcon",
        dict(new_decoder_architecture=True, num_kv_heads=1, num_ln_in_parallel_attn=1),
    ),
}

CASES |= {
    # Falcon-RW: ALiBi, sequential blocks, biases. 12 heads: non-power-of-two slopes
    # that bfloat16 rounds.
    "falcon-rw-alibi": (
        "falcon",
        dict(
            alibi=True,
            multi_query=False,
            parallel_attn=False,
            bias=True,
            num_attention_heads=12,
            hidden_size=96,
        ),
        {"attn_implementation": "sdpa"},
    ),
}
