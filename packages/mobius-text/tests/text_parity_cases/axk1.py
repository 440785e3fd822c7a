"""A.X-K1: DeepSeek-V3's tiny MLA + MoE with the post-MoE norm.

Layer 0 is dense (no post-MoE norm), layer 1 sparse: 8 experts in 4 groups, 2
groups kept, top-3, so the group mask and the perturbed correction bias both
change which experts run. The config's bos/eos ids are moved into the tiny vocab.
"""

from text_parity_cases.deepseek import MLA

MOE = dict(
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=3,
    moe_intermediate_size=32,
    n_group=4,
    topk_group=2,
    mlp_layer_types=["dense", "sparse"],
    bos_token_id=1,
    eos_token_id=2,
)

CASES = {
    "axk1": ("axk1", {**MLA, **MOE}),
    "axk1-half-rope-no-norm": (
        "axk1",
        {
            **MLA,
            **MOE,
            "rope_interleave": False,
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.7,
            "mlp_layer_types": ["sparse", "sparse"],
        },
    ),
}
