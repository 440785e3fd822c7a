"""MiniMax-M3 text: a dense full-attention layer, then two block-sparse MoE layers.

Blocks of 3 key slots: the 3 left pads of the batch-2 row fill block 0 alone (pads share
one key, so two blocks of pads would tie in the indexer's top-k, which torch and ONNX
Runtime break apart). With 2 blocks kept (1 of them local) the selection drops keys from
the prompts on; a padded row's first queries see only pads (transformers compares key
slots with positions), so they attend to every key alike. Half of each head rotates.
"""

M3 = dict(
    num_hidden_layers=3,
    layer_types=["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"],
    mlp_layer_types=["dense", "sparse", "sparse"],
    head_dim=16,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    intermediate_size=32,
    dense_intermediate_size=96,
    shared_intermediate_size=48,
    num_local_experts=4,
    num_experts_per_tok=2,
    routed_scaling_factor=2.0,
    swiglu_limit=0.5,  # the clamps bite on the perturbed tiny weights
    index_n_heads=2,
    index_head_dim=16,
    index_block_size=3,
    index_topk_blocks=2,
    index_local_blocks=1,
    bos_token_id=1,
    eos_token_id=2,
)

CASES = {
    "minimax_m3_vl_text": ("minimax_m3_vl_text", M3),
    # 3 blocks kept, 2 of them local (clamped at block 0); full rotary; a tied head
    "minimax_m3_vl_text-local2-tied": (
        "minimax_m3_vl_text",
        dict(
            M3,
            index_topk_blocks=3,
            index_local_blocks=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=True,
        ),
    ),
}
