"""A.X-K2: DeepSeek-V3.2's tiny DSA case with gated queries and gated norms; routing
over all experts (A.X-K2-Light) and, in the second case, over 2 of 4 groups where the
excluded experts score 0. (Sigmoid scores are positive, so 0 and -inf rank the same
here: that detail is implemented as HF has it but no case can tell them apart.)"""

from text_parity_cases.deepseek import MLA, MOE
from text_parity_cases.deepseek_v32 import INDEXER

AXK2 = {
    **MLA,
    **MOE,
    **INDEXER,
    "n_shared_experts": 1,
    "num_experts_per_tok": 3,
    "gated_norm_rank": 8,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

CASES = {
    "axk2": ("axk2", AXK2),
    "axk2-grouped-no-norm": (
        "axk2",
        dict(AXK2, n_group=4, topk_group=2, norm_topk_prob=False, attention_bias=True),
    ),
}
