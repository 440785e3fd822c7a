"""Depth Pro: tiny DINOv2 encoders over 16-pixel patches of a 64 x 64 image (scales 16, 32, 64:
one patch, 3 x 3 and 5 x 5 overlapping ones, merged with trimmed seams), with and without
the field-of-view head."""

#: Each encoder: 2 layers over a 4 x 4 grid of 4-pixel cells (its image is the 16-pixel patch).
DINOV2_ENCODER = dict(
    model_type="dinov2",
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    mlp_ratio=2,
    patch_size=4,
    initializer_range=0.1,
)

DEPTH_PRO = dict(
    patch_size=16,  # the default ratios (0.25, 0.5, 1) make the image 64 x 64
    fusion_hidden_size=16,
    intermediate_hook_ids=[1, 0],
    intermediate_feature_dims=[8, 8],
    scaled_images_feature_dims=[16, 16, 8],
    merge_padding_value=1,
    image_model_config=DINOV2_ENCODER,
    patch_model_config=DINOV2_ENCODER,
    fov_model_config=DINOV2_ENCODER,
    initializer_range=0.1,
)

CASES = {
    "depth_pro": ("depth_pro", DEPTH_PRO, dict(image_size=(64, 64))),
    # The FOV head (one angle per image), a 3-layer patch encoder with a wider image encoder,
    # batch-normed fusion units, one FOV head layer, and the last hook already fusion-wide
    # (no projection).
    "depth_pro-fov-batch-norm": (
        "depth_pro",
        dict(
            DEPTH_PRO,
            use_fov_model=True,
            num_fov_head_layers=1,
            use_batch_norm_in_fusion_residual=True,
            intermediate_hook_ids=[2, 0],
            intermediate_feature_dims=[8, 16],
            image_model_config=dict(DINOV2_ENCODER, hidden_size=24, num_attention_heads=3),
            patch_model_config=dict(DINOV2_ENCODER, num_hidden_layers=3),
        ),
        dict(image_size=(64, 64)),
    ),
}
