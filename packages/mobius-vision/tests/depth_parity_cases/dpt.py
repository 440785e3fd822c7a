"""DPT: its own ViT (square images: transformers reshapes the tokens to a square grid), each
readout, batch-normed fusion units, and DPT over a DINOv2 backbone (any image size)."""

from depth_parity_cases.depth_anything import DINOV2_BACKBONE

DPT = dict(
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=48,
    image_size=32,
    patch_size=4,
    backbone_out_indices=[0, 1, 2, 3],
    reassemble_factors=[4, 2, 1, 0.5],
    neck_hidden_sizes=[8, 16, 16, 32],
    fusion_hidden_size=16,
    initializer_range=0.1,  # the default 0.02 leaves a depth that barely depends on the image
)

CASES = {
    # 40 x 40 resizes the 8 x 8 position table to 10 x 10.
    "dpt": ("dpt", DPT, dict(image_size=(40, 40))),
    "dpt-add-readout-batch-norm": (
        "dpt",
        dict(
            DPT,
            readout_type="add",
            use_batch_norm_in_fusion_residual=True,
            num_hidden_layers=5,
            backbone_out_indices=[4, 1, 2, 0],  # read in layer order
        ),
        dict(image_size=(24, 24)),
    ),
    "dpt-ignore-readout": ("dpt", dict(DPT, readout_type="ignore"), dict(image_size=(32, 32))),
    "dpt-dinov2-backbone": (
        "dpt",
        dict(DPT, backbone_config=dict(DINOV2_BACKBONE, apply_layernorm=True)),
        dict(image_size=(28, 36)),
    ),
}
