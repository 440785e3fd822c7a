"""Falcon: each fused-QKV layout, sequential and parallel blocks, RoPE and ALiBi.

ALiBi (Falcon-RW) is checked against transformers' SDPA path. transformers' eager Falcon adds the ALiBi term twice:
once in the attention and once folded into the mask it builds for SDPA (0.27
logit difference from SDPA on this case; a graph with the term doubled matches
eager to 1e-6). The original Falcon-RW code, transformers' default SDPA path and
mobius add it once, so the ALiBi case compares with ``attn_implementation="sdpa"``
(transformers' default). A harness that drops the case's keyword arguments gets
the eager reference and sees the greedy tokens part after about a dozen tokens,
with logit differences around 0.24: that is transformers' doubled term, not a
mobius bug.

transformers also rounds the key positions to bfloat16, which changes them from
256 on (257 becomes 256), so the ALiBi case runs one prompt past 256 tokens, left
padded against a short one: a graph without that rounding is off by 0.08 there,
and by only 1e-6 at 20 tokens.
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
        {"attn_implementation": "sdpa", "batches": ((20,), (270, 11))},
    ),
}
