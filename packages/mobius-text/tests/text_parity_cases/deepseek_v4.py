"""DeepSeek-V4: three layers, one of each attention type (sliding window of 4,
compressed-sparse with windows of 2 and an indexer keeping 2 entries, heavily compressed
with windows of 4), so that the window, the pooled entries and the indexer's choice all
bite within the 15 tokens of a run (7 prompt + 8 decode); 3 hyper-connection streams with
3 Sinkhorn iterations; 8 experts, top-2, the first layer hash-routed; a SwiGLU clamp of
0.3 that bites on the perturbed weights. The second case: two streams, ``o_groups`` 4,
YaRN on the compressed layers, windows of 3 and 2, the hash layer last.

transformers' hash table ``tid2eid`` is an integer buffer the harness does not perturb
(all zeros: every token picks expert 0 twice, whose weights then add up).

Top-k ties: an index score is exactly 0 only when all 8 indexer heads' ReLUs are 0, and
unclosed entries tie at -inf (never kept), so no selection depends on the tie order.
"""

V4 = {
    "num_key_value_heads": 1,
    "head_dim": 16,
    "partial_rotary_factor": 0.5,
    "q_lora_rank": 24,
    "o_groups": 2,
    "o_lora_rank": 12,
    "sliding_window": 4,
    "num_hidden_layers": 3,
    "layer_types": [
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
    ],
    "compress_rates": {"compressed_sparse_attention": 2, "heavily_compressed_attention": 4},
    "hc_mult": 3,
    "hc_sinkhorn_iters": 3,
    "mlp_layer_types": ["hash_moe", "moe", "moe"],
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "intermediate_size": 32,  # transformers maps it onto moe_intermediate_size
    "index_n_heads": 8,
    "index_head_dim": 16,
    "index_topk": 2,
    "swiglu_limit": 0.3,
    "routed_scaling_factor": 2.5,
}

CASES = {
    "deepseek_v4": ("deepseek_v4", V4),
    "deepseek_v4-yarn-grouped": (
        "deepseek_v4",
        dict(
            V4,
            num_attention_heads=8,
            o_groups=4,
            hc_mult=2,
            hc_sinkhorn_iters=5,
            sliding_window=3,
            compress_rates={"compressed_sparse_attention": 3, "heavily_compressed_attention": 2},
            layer_types=[
                "heavily_compressed_attention",
                "compressed_sparse_attention",
                "sliding_attention",
            ],
            mlp_layer_types=["moe", "moe", "hash_moe"],
            index_topk=1,
            rope_parameters={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
            },
        ),
    ),
}
