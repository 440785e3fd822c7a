"""ConvNeXt V2: GRN blocks, at two patch sizes and a non-square image."""

from vision_parity_cases.convnext import CONVNEXT

CASES = {
    "convnextv2": ("convnextv2", CONVNEXT),
    "convnextv2-patch2-wide": (
        "convnextv2",
        dict(CONVNEXT, patch_size=2, image_size=[20, 28], hidden_act="gelu_new"),
    ),
}
