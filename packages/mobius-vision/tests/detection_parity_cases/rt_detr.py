"""RT-DETR over its ResNet-vd: basic and bottleneck backbones, AIFI, FPN/PAN, query selection,
deformable decoder with box refinement; a fourth level, pre-norm AIFI, narrower CSP blocks."""

#: RT-DETR's ResNet-vd at three levels (strides 8, 16, 32).
RT_DETR_RESNET = dict(
    model_type="rt_detr_resnet",
    embedding_size=8,
    hidden_sizes=[8, 16, 16, 24],
    depths=[1, 1, 1, 1],
    layer_type="basic",
    out_features=["stage2", "stage3", "stage4"],
)

#: The hybrid encoder and decoder at hidden 16.
TINY_RT_DETR = dict(
    backbone_config=RT_DETR_RESNET,
    encoder_in_channels=[16, 16, 24],
    encoder_hidden_dim=16,
    encoder_ffn_dim=32,
    encoder_attention_heads=2,
    d_model=16,
    decoder_in_channels=[16, 16, 16],
    decoder_ffn_dim=32,
    decoder_attention_heads=2,
    decoder_n_points=2,
    decoder_layers=2,
    num_queries=7,
    num_labels=3,
    num_denoising=0,
    initializer_range=0.2,
)

CASES = {
    "rt_detr": ("rt_detr", TINY_RT_DETR, dict(image_size=(64, 64))),
    "rt_detr-bottleneck-4-levels-pre-norm": (
        "rt_detr",
        dict(
            TINY_RT_DETR,
            backbone_config=dict(
                RT_DETR_RESNET,
                layer_type="bottleneck",
                hidden_sizes=[16, 16, 32, 32],
                depths=[1, 2, 1, 1],
            ),
            encoder_in_channels=[16, 32, 32],
            num_feature_levels=4,
            normalize_before=True,
            hidden_expansion=0.5,
        ),
        dict(image_size=(64, 96)),
    ),
}
