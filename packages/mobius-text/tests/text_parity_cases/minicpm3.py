"""MiniCPM3: MLA (rotate-half RoPE) with muP scalings that all differ from 1 here."""

MLA = dict(
    num_key_value_heads=4,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=12,
    qk_rope_head_dim=8,
    v_head_dim=10,
    scale_emb=12,
    scale_depth=1.4,
    dim_model_base=16,
)

CASES = {
    "minicpm3": ("minicpm3", MLA),
    "minicpm3-untied-no-q-lora-bias": (
        "minicpm3",
        {**MLA, "tie_word_embeddings": False, "q_lora_rank": None, "mlp_bias": True},
    ),
}
