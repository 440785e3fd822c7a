"""SAM: a 64-pixel image in 8-pixel patches, windows of 4 with one global layer."""

#: The tiny SAM (the image embedding is 16 channels on an 8x8 grid; masks are 32x32).
SAM_OVERRIDES = dict(
    vision_config=dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=64,
        patch_size=8,
        output_channels=16,
        window_size=3,  # 8 is no multiple of 3: the windows are padded
        global_attn_indexes=[1],
        mlp_dim=64,
        num_pos_feats=8,
        initializer_range=0.2,
    ),
    prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=8),
    mask_decoder_config=dict(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        mlp_dim=32,
        iou_head_hidden_dim=16,
    ),
    initializer_range=0.2,  # the masks' logits of order one, not 1e-2
)

CASES = {"sam": ("sam", SAM_OVERRIDES, {"model_class": "SamModel"})}
