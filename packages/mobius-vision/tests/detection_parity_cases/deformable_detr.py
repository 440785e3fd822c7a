"""Deformable DETR over a transformers ResNet: multi-scale (two backbone maps and one extra
level, sine positions); two-stage with box refinement (a tall image, so that the proposals
along its top and bottom edges are invalid); single-scale with box refinement (learned
positions, gelu)."""

#: Two maps (strides 8 and 16) for the multi-scale cases; a third level comes from a conv.
DEFORMABLE_RESNET = dict(
    model_type="resnet",
    embedding_size=8,
    hidden_sizes=[8, 16, 16],
    depths=[1, 1, 1],
    layer_type="basic",
    out_features=["stage2", "stage3"],
)

#: d_model 32: the input projections' GroupNorm has 32 groups.
TINY_DEFORMABLE_DETR = dict(
    use_timm_backbone=False,
    backbone_config=DEFORMABLE_RESNET,
    d_model=32,
    encoder_layers=1,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    num_feature_levels=3,
    encoder_n_points=2,
    decoder_n_points=2,
    num_queries=5,
    num_labels=3,
    init_std=0.2,  # transformers' 0.02 leaves boxes nearly the same for every image
)

CASES = {
    "deformable_detr": ("deformable_detr", TINY_DEFORMABLE_DETR, dict(image_size=(64, 48))),
    # Stride 4 and 8 maps of a 208-pixel-tall image: the first level's top and bottom rows
    # have centres within 0.01 of the edge, so their proposals are invalid, and 50 of them
    # are kept, so the invalid ones are among them. Weights of std 0.05: at 0.2 the boxes'
    # sigmoids saturate, and refining them (inverse_sigmoid near 0 and 1) leaves
    # transformers' own float32 result 1e-4 from its float64 one (measured), as do extra
    # levels of 2x2 and 1x1 pixels.
    "deformable_detr-two-stage-box-refine": (
        "deformable_detr",
        dict(
            TINY_DEFORMABLE_DETR,
            backbone_config=dict(
                DEFORMABLE_RESNET,
                hidden_sizes=[8, 16],
                depths=[1, 1],
                out_features=["stage1", "stage2"],
            ),
            with_box_refine=True,
            two_stage=True,
            two_stage_num_proposals=50,
            init_std=0.05,
        ),
        dict(image_size=(208, 64)),
    ),
    "deformable_detr-single-scale-box-refine": (
        "deformable_detr",
        dict(
            TINY_DEFORMABLE_DETR,
            backbone_config=dict(DEFORMABLE_RESNET, out_features=["stage3"]),
            num_feature_levels=1,
            with_box_refine=True,
            position_embedding_type="learned",
            activation_function="gelu",
        ),
        dict(image_size=(48, 64)),
    ),
}
