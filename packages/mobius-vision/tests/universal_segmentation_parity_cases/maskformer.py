"""MaskFormer over a transformers ResNet (three maps: a two-layer FPN), with and without the
input projection, a wide image, and a bottleneck backbone with gelu in the decoder; over Swin
(MaskFormer's own, four stages), every stage padded to its windows."""

#: transformers' ResNet, three stages (MaskFormer's FPN needs more than one map).
RESNET = dict(
    model_type="resnet",
    embedding_size=8,
    hidden_sizes=[8, 16, 24],
    depths=[1, 1, 1],
    layer_type="basic",
    out_features=["stage1", "stage2", "stage3"],
)
#: DETR's decoder at hidden 32 (GroupNorm(32) needs fpn_feature_size a multiple of 32).
DECODER = dict(
    model_type="detr",
    d_model=32,
    decoder_layers=1,
    decoder_attention_heads=2,
    decoder_ffn_dim=32,
    encoder_layers=1,
    num_queries=5,
    init_std=1.0,  # transformers' 0.02 leaves every query's class and mask nearly the same
)
MASKFORMER = dict(
    backbone_config=RESNET,
    decoder_config=DECODER,
    fpn_feature_size=32,
    mask_feature_size=16,
    num_labels=3,
    init_std=1.0,  # the query table: distinct queries
)
#: A hub-style ``swin`` backbone_config: transformers makes it MaskFormer's own Swin, all four
#: stages out. Window 4 on a 12x20 patch grid (48x80 pixels): the stages (12x20, 6x10, 3x5,
#: 2x3) are padded to whole windows; the shifted blocks' masks at each padded size.
SWIN = dict(
    model_type="swin",
    embed_dim=8,
    depths=[2, 1, 1, 2],
    num_heads=[1, 1, 2, 2],
    window_size=4,
)
OPTIONS = dict(model_class="MaskFormerForInstanceSegmentation")

CASES = {
    "maskformer-resnet": ("maskformer", MASKFORMER, dict(OPTIONS, image_size=(64, 64))),
    # Last map as wide as the decoder (no input projection), two layers, a 48x80 image.
    "maskformer-resnet-no-projection-2-layers": (
        "maskformer",
        dict(
            MASKFORMER,
            backbone_config=dict(RESNET, hidden_sizes=[8, 16, 32]),
            decoder_config=dict(DECODER, decoder_layers=2),
        ),
        dict(OPTIONS, image_size=(48, 80)),
    ),
    "maskformer-bottleneck-resnet-gelu": (
        "maskformer",
        dict(
            MASKFORMER,
            backbone_config=dict(RESNET, layer_type="bottleneck", hidden_sizes=[16, 32, 64]),
            decoder_config=dict(DECODER, activation_function="gelu"),
            fpn_feature_size=64,
        ),
        dict(OPTIONS, image_size=(45, 70)),
    ),
    "maskformer-swin": (
        "maskformer",
        dict(MASKFORMER, backbone_config=SWIN),
        dict(OPTIONS, image_size=(48, 80)),
    ),
}
