"""DeepSeek-V3.2: DeepSeek-V3's tiny MLA + MoE with the lightning indexer keeping the
4 best of up to 15 keys per query (so the sparse mask bites from the fifth token on);
8 indexer heads of 16 channels, the first 8 rotated."""

from text_parity_cases.deepseek import MLA, MOE

INDEXER = dict(index_topk=4, index_head_dim=16, index_n_heads=8)

CASES = {
    "deepseek_v32": (
        "deepseek_v32",
        {
            **MLA,
            **MOE,
            **INDEXER,
            "n_group": 4,
            "topk_group": 2,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),
    "deepseek_v32-no-norm-topk6": (
        "deepseek_v32",
        {
            **MLA,
            **MOE,
            **INDEXER,
            "index_topk": 6,
            "n_group": 2,
            "topk_group": 1,
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.5,
            "first_k_dense_replace": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),
}
