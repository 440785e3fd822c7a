"""DBRX: fused Wqkv with a clamp that bites, 8 experts top-2, L1- and L2-normalised routing.

DBRX names its sizes ``d_model``/``n_heads``/``n_layers``/``max_seq_len``; transformers 5
also needs ``attn_config.rope_theta`` to build the attention (it reads it, then ignores it).
"""

BASE = dict(
    d_model=64,
    n_heads=4,
    n_layers=2,
    max_seq_len=64,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)
ATTN = dict(kv_n_heads=2, rope_theta=10000.0)
FFN = dict(ffn_hidden_size=48, moe_num_experts=8, moe_top_k=2)

CASES = {
    "dbrx": ("dbrx", dict(**BASE, attn_config=dict(**ATTN, clip_qkv=0.3), ffn_config=FFN)),
    "dbrx-l2-mha": (
        "dbrx",
        dict(
            **BASE,
            # transformers 5 cannot run DBRX without clip_qkv (clamp(None, None)): a loose one.
            attn_config=dict(kv_n_heads=4, rope_theta=10000.0, clip_qkv=100.0),
            ffn_config=dict(**FFN, moe_normalize_expert_weights=2.0),
        ),
    ),
}
