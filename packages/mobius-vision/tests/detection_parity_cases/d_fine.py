"""D-FINE over its HGNetV2: GELAN encoder, gated deformable decoder, distribution refinement
and the quality term; a projected decoder input and a fourth level."""

from .rt_detr import TINY_RT_DETR

#: HGNetV2 at three levels (strides 8, 16, 32 of a 4x stem).
HGNET_V2 = dict(
    model_type="hgnet_v2",
    stem_channels=[3, 8, 8],
    stage_in_channels=[8, 16, 16, 16],
    stage_mid_channels=[8, 8, 8, 16],
    stage_out_channels=[16, 16, 16, 24],
    stage_num_blocks=[1, 1, 1, 1],
    stage_downsample=[False, True, True, True],
    stage_light_block=[False, False, True, True],
    stage_kernel_size=[3, 3, 5, 5],
    stage_numb_of_layers=[2, 2, 2, 2],
    depths=[1, 1, 1, 1],
    hidden_sizes=[16, 16, 16, 24],
    out_features=["stage2", "stage3", "stage4"],
    initializer_range=1.0,  # its maps barely differ between images at the default
)

TINY_D_FINE = dict(
    TINY_RT_DETR,
    backbone_config=HGNET_V2,
    encoder_in_channels=[16, 16, 24],
    max_num_bins=8,
    top_prob_values=3,
    lqe_hidden_dim=8,
    depth_mult=0.34,
)

CASES = {
    "d_fine": ("d_fine", TINY_D_FINE, dict(image_size=(64, 64))),
    "d_fine-projected-4-levels": (
        "d_fine",
        dict(
            TINY_D_FINE,
            d_model=32,
            decoder_in_channels=[16, 16, 16],
            num_feature_levels=4,
            decoder_n_points=[3, 3, 3, 3],
            decoder_layers=3,
            hidden_expansion=0.5,
        ),
        dict(image_size=(64, 96)),
    ),
}
