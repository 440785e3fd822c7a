"""GLM-MoE-DSA: DeepSeek-V3.2's tiny case with interleaved indexer RoPE and three layers,
the middle one reusing the first layer's key selection (no indexer, no indexer cache)."""

from text_parity_cases.deepseek import MLA, MOE
from text_parity_cases.deepseek_v32 import INDEXER

GLM_DSA = {
    **MLA,
    **MOE,
    **INDEXER,
    "num_hidden_layers": 3,
    "indexer_types": ["full", "shared", "full"],
    "n_group": 4,
    "topk_group": 2,
}

CASES = {
    "glm_moe_dsa": ("glm_moe_dsa", GLM_DSA),
    "glm_moe_dsa-shared-last-tied": (
        "glm_moe_dsa",
        dict(
            GLM_DSA,
            indexer_types=["full", "full", "shared"],
            index_topk=6,
            first_k_dense_replace=0,
            tie_word_embeddings=True,
        ),
    ),
}
