"""HY-V4: DeepSeek's tiny MLA (rotate-half RoPE) with sinks and output gates, three
layers over 3 hyper-connection streams, the middle layer reusing layer 0's key selection;
the indexer (8 heads of 16 channels, the last 8 rotated) keeps the 4 best keys. Layer 0
is dense, then 8 sigmoid-routed experts with a SwiGLU clamp of 0.3 (small enough that
it bites on the perturbed weights) plus a shared expert. The second case: two streams,
every layer sparse, the last layer shared, ``hc_eps`` 0.05, tied embeddings, YaRN with ``mscale_all_dim``.

Top-k ties: an index score is exactly 0 only when all 8 heads' ReLUs are 0, and masked
keys tie at the lowest float (masked in the attention either way), so no selection
depends on the tie order of ``TopK``.
"""

from text_parity_cases.deepseek import MLA, YARN

HY_V4 = {
    **MLA,
    "num_hidden_layers": 3,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 32,
    "routed_scaling_factor": 2.5,
    "index_topk": 4,
    "index_head_dim": 16,
    "index_n_heads": 8,
    "indexer_types": ["full", "shared", "full"],
    "hc_mult": 3,
    "hc_magnitude": 1.5,
    "swiglu_limit": 0.3,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

CASES = {
    "hy_v4": ("hy_v4", HY_V4),
    "hy_v4-two-streams-tied-yarn": (
        "hy_v4",
        dict(
            HY_V4,
            indexer_types=["full", "full", "shared"],
            mlp_layer_types=["sparse", "sparse", "sparse"],
            index_topk=6,
            hc_mult=2,
            hc_eps=0.05,  # large enough that the eps on pre and post shows
            norm_topk_prob=False,
            tie_word_embeddings=True,
            **YARN,
        ),
    ),
}
