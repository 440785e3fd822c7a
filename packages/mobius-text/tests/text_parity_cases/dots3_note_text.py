"""Dots 3 Note text: indexed MLA (index_topk 4 < the test sequence) beside a sliding MLA layer
(window 3) with its own sizes, per-type RoPE bases, gated heads, grouped MoE."""

DOTS = dict(
    num_hidden_layers=3,
    layer_types=["indexed_attention", "sliding_attention", "indexed_attention"],
    mlp_layer_types=["dense", "sparse", "sparse"],
    num_key_value_heads=4,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    head_dim=24,
    index_head_dim=16,
    # 8 indexer heads, as deepseek_v32's case: with 2, relu(q.k) often scores several keys
    # exactly 0 for both heads, and torch's and ONNX Runtime's TopK break such ties apart.
    index_n_heads=8,
    index_topk=4,
    sliding_window=3,
    swa_num_attention_heads=2,
    swa_num_key_value_heads=2,
    swa_q_lora_rank=16,
    swa_kv_lora_rank=12,
    swa_head_dim=20,
    swa_qk_nope_head_dim=16,
    swa_qk_rope_head_dim=4,
    swa_v_head_dim=8,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    moe_intermediate_size=32,
    shared_experts_intermediate_size=48,
    n_group=2,
    topk_group=1,
    bos_token_id=1,  # the defaults are outside the tiny vocabulary
    eos_token_id=1,
)

CASES = {
    "dots3_note_text": ("dots3_note_text", DOTS),
    # use_dsa=False: the non-sliding layers attend to every key, no indexer.
    "dots3_note_text-full-untied-unnormalised": (
        "dots3_note_text",
        dict(DOTS, use_dsa=False, tie_word_embeddings=False, norm_topk_prob=False),
    ),
}
