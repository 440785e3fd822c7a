"""HGNetV2: plain and light HG blocks, residual repeats, learnable affine blocks, stem strides.

Only the classifier is compared: ``AutoModel`` makes an ``HGNetV2Backbone``, whose
``feature_maps`` the kit does not read, so ``--head none`` has no PyTorch counterpart here.
"""

HGNET_V2 = dict(
    image_size=32,
    stem_channels=[3, 8, 12],
    stage_in_channels=[12, 16],
    stage_mid_channels=[8, 8],
    stage_out_channels=[16, 24],
    stage_num_blocks=[1, 2],
    stage_downsample=[False, True],
    stage_downsample_strides=[2, 2],
    stage_light_block=[False, True],
    stage_kernel_size=[3, 5],
    stage_numb_of_layers=[2, 2],
    hidden_sizes=[16, 24],
    depths=[1, 2],
    num_labels=3,
    # Eval BatchNorm keeps the scale of its input: at the default 0.02 the conv weights shrink
    # the signal so much that every image gives the same logits.
    initializer_range=0.25,
)

CASES = {
    "hgnet_v2": ("hgnet_v2", HGNET_V2, dict(heads=("image-classification",))),
    "hgnet_v2-lab-gelu-odd-size-3-stages": (
        "hgnet_v2",
        dict(
            HGNET_V2,
            image_size=[29, 35],
            num_channels=4,
            stem_channels=[4, 8, 12],
            stem_strides=[2, 1, 1, 1, 1],
            stage_in_channels=[12, 16, 24],
            stage_mid_channels=[8, 8, 12],
            stage_out_channels=[16, 24, 32],
            stage_num_blocks=[2, 1, 2],
            stage_downsample=[True, True, False],
            stage_downsample_strides=[2, 1, 2],
            stage_light_block=[True, False, True],
            stage_kernel_size=[3, 3, 5],
            stage_numb_of_layers=[1, 3, 2],
            hidden_sizes=[16, 24, 32],
            depths=[2, 1, 2],
            hidden_act="gelu",
            use_learnable_affine_block=True,
        ),
        dict(heads=("image-classification",)),
    ),
}
