"""Mask2Former over a transformers ResNet (four maps, strides 4 to 32: the deformable
encoder reads the last three, the FPN adds the first), with and without the decoder's input
projections, two and three masked-attention layers; over transformers' Swin (strides 4 to 32
too), at a size no stage's window divides."""

from .maskformer import SWIN as MASKFORMER_SWIN

#: transformers' ResNet, four stages: strides 4, 8, 16, 32 (Mask2Former's feature_strides).
RESNET = dict(
    model_type="resnet",
    embedding_size=8,
    hidden_sizes=[8, 16, 24, 32],
    depths=[1, 1, 1, 1],
    layer_type="basic",
    out_features=["stage1", "stage2", "stage3", "stage4"],
)
MASK2FORMER = dict(
    backbone_config=RESNET,
    feature_size=32,  # GroupNorm(32)
    mask_feature_size=16,
    hidden_dim=32,
    encoder_feedforward_dim=32,
    dim_feedforward=32,
    encoder_layers=1,
    decoder_layers=3,
    num_attention_heads=2,
    num_queries=5,
    num_labels=3,
    init_std=1.0,  # transformers' 0.02 leaves every query's class and mask nearly the same
)
#: transformers' SwinBackbone, MaskFormer's case's four stages; window 4 on a 12x18 patch grid
#: (48x72 pixels): the stages (12x18, 6x9, 3x5, 2x3) are padded to whole windows.
SWIN = dict(MASKFORMER_SWIN, out_features=["stage1", "stage2", "stage3", "stage4"])
OPTIONS = dict(model_class="Mask2FormerForUniversalSegmentation")

CASES = {
    "mask2former-resnet": ("mask2former", MASK2FORMER, dict(OPTIONS, image_size=(64, 64))),
    # Decoder wider than the pixel decoder (input projections), four layers: every level
    # attended and the first again; a 64x96 image.
    "mask2former-resnet-projected-4-layers": (
        "mask2former",
        dict(MASK2FORMER, hidden_dim=48, decoder_layers=5, activation_function="gelu"),
        dict(OPTIONS, image_size=(64, 96)),
    ),
    "mask2former-swin": (
        "mask2former",
        dict(MASK2FORMER, backbone_config=SWIN),
        dict(OPTIONS, image_size=(48, 72)),
    ),
}
