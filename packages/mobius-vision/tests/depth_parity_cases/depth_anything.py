"""Depth Anything over a tiny DINOv2 backbone; the images are not the position table's size."""

#: A 4-layer DINOv2 whose last four hidden states feed the neck (as the real ones do).
DINOV2_BACKBONE = dict(
    model_type="dinov2",
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    mlp_ratio=2,
    image_size=32,
    patch_size=4,
    out_indices=[1, 2, 3, 4],
    reshape_hidden_states=False,
    initializer_range=0.1,  # the default 0.02 leaves a depth that barely depends on the image
)

DEPTH_ANYTHING = dict(
    backbone_config=DINOV2_BACKBONE,
    patch_size=4,
    reassemble_hidden_size=32,
    reassemble_factors=[4, 2, 1, 0.5],
    neck_hidden_sizes=[8, 16, 16, 32],
    fusion_hidden_size=16,
    head_hidden_size=8,
    initializer_range=0.1,
)

CASES = {
    # Relative depth (ReLU head); 28 x 36 interpolates the 8 x 8 position table to 7 x 9.
    "depth_anything": ("depth_anything", DEPTH_ANYTHING, dict(image_size=(28, 36))),
    # Metric depth (sigmoid head times max_depth), a SwiGLU backbone and a larger image.
    "depth_anything-metric-swiglu": (
        "depth_anything",
        dict(
            DEPTH_ANYTHING,
            backbone_config=dict(DINOV2_BACKBONE, use_swiglu_ffn=True),
            depth_estimation_type="metric",
            max_depth=20,
        ),
        dict(image_size=(44, 40)),
    ),
}
