"""The tiny backbone and transformer sizes the DETR-family cases share."""

#: A transformers ResNet backbone (DETR's default is a timm one, which mobius does not map).
RESNET_BACKBONE = dict(
    model_type="resnet",
    embedding_size=8,
    hidden_sizes=[8, 16],
    depths=[1, 1],
    layer_type="basic",
    out_features=["stage2"],
)

#: DETR's encoder–decoder at hidden 16, one layer each.
TINY_DETR = dict(
    use_timm_backbone=False,
    backbone_config=RESNET_BACKBONE,
    d_model=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    num_queries=5,
    num_labels=3,
    init_std=0.2,  # transformers' 0.02 leaves boxes nearly the same for every image
)
