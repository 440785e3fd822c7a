"""SegFormer: spatial reduction on and off, uneven grids, a 3-stage encoder."""

SEGFORMER = dict(
    hidden_sizes=[8, 16, 24, 32],
    num_attention_heads=[1, 2, 3, 4],
    depths=[1, 1, 1, 1],
    sr_ratios=[4, 2, 1, 1],
    mlp_ratios=[2, 2, 2, 2],
    decoder_hidden_size=16,
    num_labels=5,
    initializer_range=0.5,
)

CASES = {
    "segformer": ("segformer", SEGFORMER, dict(image_size=(64, 64))),
    # 40x56: stage grids 10x14, 5x7, 3x4, 2x2, so every upsampling is uneven.
    "segformer-3-stages-wide-relu": (
        "segformer",
        dict(
            SEGFORMER,
            num_encoder_blocks=3,
            hidden_sizes=[8, 16, 24],
            num_attention_heads=[2, 2, 3],
            depths=[2, 1, 1],
            sr_ratios=[2, 2, 1],
            patch_sizes=[7, 3, 5],
            strides=[4, 2, 2],
            mlp_ratios=[3, 2, 1],
            hidden_act="relu",
            num_channels=4,
        ),
        dict(image_size=(40, 56)),
    ),
}
