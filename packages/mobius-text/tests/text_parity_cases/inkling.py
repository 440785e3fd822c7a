"""Inkling text decoders: relative-bias attention, four short convolutions per layer, MoE."""

INKLING = dict(
    head_dim=16,
    swa_num_attention_heads=4,
    swa_num_key_value_heads=1,
    swa_head_dim=8,
    sliding_window_size=4,  # shorter than the 15 tokens a case runs
    d_rel=4,
    rel_extent=6,  # the full layer's bias is zero beyond 6 tokens back
    local_layer_ids=[0],  # layer 0 windowed, layer 1 full
    dense_mlp_idx=1,  # layer 0 dense, layer 1 MoE
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=2,
    moe_intermediate_size=32,
    conv_kernel_size=3,
    logits_mup_width_multiplier=4.0,
)

CASES = {
    "inkling_text": ("inkling_text", INKLING),
    # log scaling from index 3 on, a head padded past the logits, one shared expert
    "inkling_text-log-scaling-padded-head": (
        "inkling_text",
        dict(
            INKLING,
            log_scaling_n_floor=3,
            log_scaling_alpha=0.5,
            unpadded_vocab_size=120,
            n_shared_experts=1,
            local_layer_ids=[1],
        ),
    ),
}

# Inkling-2: 3 layers in blocks of 2 (layer 1 adds to its block, 0 and 2 start one), every
# clip and softcap small enough to bite, the head padded past the logits.
INKLING2 = dict(
    num_hidden_layers=3,
    layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"],
    n_layers_per_attn_res_block=2,
    head_dim=16,
    swa_num_attention_heads=4,
    swa_num_key_value_heads=2,
    swa_head_dim=8,
    sliding_window_size=4,
    d_rel=4,
    rel_extent=6,
    log_scaling_n_floor=3,
    log_scaling_alpha=0.5,
    qk_l2_clip_threshold=1.0,
    rel_l2_clip_threshold=0.5,
    mlp_gate_softcap=0.5,
    mlp_up_softcap=0.5,
    final_logit_softcapping=2.0,
    n_routed_experts=4,
    num_experts_per_tok=2,
    intermediate_size=32,  # the experts' width (moe_intermediate_size)
    conv_kernel_size=3,
    unpadded_vocab_size=120,
    eos_token_id=2,
)

# Inkling-2 Loop: layers 1 and 2 run 3 times (cache entries 4..7 hold passes 2 and 3).
INKLING2_LOOP = dict(
    INKLING2,
    num_hidden_layers=4,
    layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
    n_layers_per_attn_res_block=1,
    loop_layer_index_start=1,
    loop_layer_index_end=3,
    loop_num_passes=3,
    loop_gate_rank=8,
)

CASES["inkling2_text"] = ("inkling2_text", INKLING2)
# batch 2 only (its first row is unpadded): PyTorch's tiny depthwise convs (8 layer runs x 4
# per step) make this the slow half of the case on a 2-core machine.
CASES["inkling2_loop_text"] = ("inkling2_loop_text", INKLING2_LOOP, {"batches": ((7, 4),)})
