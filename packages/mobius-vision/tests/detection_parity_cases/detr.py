"""DETR over a transformers ResNet (sine and learned positions, bottleneck stages, gelu), and
over ConvNeXt."""

from ._tiny import RESNET_BACKBONE, TINY_DETR

CASES = {
    "detr": ("detr", TINY_DETR),
    "detr-learned-positions-2-layers": (
        "detr",
        dict(TINY_DETR, position_embedding_type="learned", encoder_layers=2, decoder_layers=2),
    ),
    "detr-bottleneck-backbone-gelu": (
        "detr",
        dict(
            TINY_DETR,
            backbone_config=dict(
                RESNET_BACKBONE, layer_type="bottleneck", hidden_sizes=[16, 32], depths=[2, 1]
            ),
            activation_function="gelu",
        ),
        dict(image_size=(45, 70)),
    ),
    # Any registered backbone_class serves: ConvNeXt's (its last map).
    "detr-convnext-backbone": (
        "detr",
        dict(
            TINY_DETR,
            backbone_config=dict(
                model_type="convnext",
                hidden_sizes=[8, 16],
                depths=[1, 1],
                num_stages=2,
                out_features=["stage2"],
            ),
        ),
    ),
}
