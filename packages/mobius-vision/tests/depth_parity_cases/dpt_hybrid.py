"""DPT-Hybrid: a tiny BiT stem (TF-SAME bottlenecks, output stride 16) under DPT's ViT; its
first two stage maps go to the neck as they are, the ViT's last two read layers after them."""

from depth_parity_cases.dpt import DPT

#: DPT-Hybrid's BiT (Intel/dpt-hybrid-midas: depths [3, 4, 9], widths 256..1024), tiny.
BIT_BACKBONE = dict(
    global_padding="same",
    layer_type="bottleneck",
    depths=[1, 1, 1],
    hidden_sizes=[16, 32, 64, 128],  # 4 widths for 3 stages, as the real config lists them
    embedding_size=8,
    num_groups=4,
    out_features=["stage1", "stage2", "stage3"],
    embedding_dynamic_padding=True,
    initializer_range=0.1,
)

DPT_HYBRID = dict(
    DPT,
    is_hybrid=True,
    backbone_config=BIT_BACKBONE,
    backbone_featmap_shape=[1, 64, 4, 4],
    image_size=64,
    patch_size=16,
    backbone_out_indices=[0, 1, 2, 3],  # the hybrid reads layers 2 and 3 only
    neck_hidden_sizes=[16, 32, 16, 32],  # the first two: the BiT stages' widths
    reassemble_factors=[1, 1, 1, 0.5],
)

CASES = {
    # The position table is for 64 x 64 images, the only size transformers' hybrid takes.
    "dpt-hybrid": ("dpt", DPT_HYBRID, dict(image_size=(64, 64))),
}
