"""ZoeDepth over a tiny BEiT backbone (relative position tables resampled to each image's patch
grid): one metric head (softplus and normed bin centres) and the two-domain "NK" form (the
patch-transformer classifier picks one head for the batch)."""

#: A 4-layer BEiT whose four layer outputs feed the neck as tokens (ZoeDepth's own layout).
BEIT_BACKBONE = dict(
    model_type="beit",
    image_size=32,
    patch_size=4,
    hidden_size=16,
    num_hidden_layers=4,
    num_attention_heads=2,
    intermediate_size=32,
    use_relative_position_bias=True,
    reshape_hidden_states=False,
    out_features=["stage1", "stage2", "stage3", "stage4"],
    # 0.02 (the default) leaves a depth that barely depends on the image; past ~0.2 float32
    # rounding, PyTorch's as much as ONNX Runtime's, is amplified by the attractors and the
    # log-binomial's low temperatures beyond 1e-4 of the depth (both measured against float64)
    initializer_range=0.15,
)

ZOEDEPTH = dict(
    backbone_config=BEIT_BACKBONE,
    neck_hidden_sizes=[8, 16, 16, 32],
    fusion_hidden_size=16,
    bottleneck_features=16,
    bin_embedding_dim=16,
    num_relative_features=8,
    num_attractors=[4, 4, 2, 1],
    bin_configurations=[{"n_bins": 8, "min_depth": 0.001, "max_depth": 10.0}],
    initializer_range=0.15,
)

#: The "NK" form: two bin configurations, routed by the patch transformer (its width is fixed
#: at 128 by transformers' classifier; 4 layers, all it runs).
ZOEDEPTH_NK = dict(
    ZOEDEPTH,
    bin_configurations=[
        {"name": "nyu", "n_bins": 8, "min_depth": 0.001, "max_depth": 10.0},
        {"name": "kitti", "n_bins": 6, "min_depth": 0.001, "max_depth": 80.0},
    ],
    num_patch_transformer_layers=4,
    patch_transformer_hidden_size=128,
    patch_transformer_intermediate_size=32,
    patch_transformer_num_attention_heads=4,
)

CASES = {
    # 28 x 40: a 7 x 10 patch grid, the 8 x 8 relative position tables resampled to it.
    "zoedepth": ("zoedepth", ZOEDEPTH, dict(image_size=(28, 40))),
    "zoedepth-normed-bins-sum-attractors": (
        "zoedepth",
        dict(ZOEDEPTH, bin_centers_type="normed", attractor_kind="sum"),
        dict(image_size=(36, 32)),
    ),
    # The domain classifier picks the second configuration for seed 0's weights and images,
    # the first for seed 3's (checked against the reference's domain_logits when written).
    "zoedepth-nk": ("zoedepth", ZOEDEPTH_NK, dict(image_size=(32, 24))),
    "zoedepth-nk-first-domain": ("zoedepth", ZOEDEPTH_NK, dict(image_size=(32, 24), seed=3)),
}
