"""SAM 2: a 64-pixel image, Hiera stages on 16, 8, 4 and 2 patch grids, a 4x4 embedding.

Stage 0 attends within windows of 8 (two blocks: the second of stage 1 is global);
stage 3's first block pools windows of 3 on a 4x4 grid, which are padded.
"""

from sam_parity_cases.sam import SAM_OVERRIDES

SAM2_OVERRIDES = dict(
    vision_config=dict(
        backbone_config=dict(
            model_type="sam2_hiera_det_model",
            hidden_size=16,
            image_size=[64, 64],
            window_positional_embedding_background_size=[4, 4],  # resized bicubically to 16x16
            blocks_per_stage=[1, 2, 1, 1],
            embed_dim_per_stage=[16, 24, 32, 40],
            num_attention_heads_per_stage=[1, 2, 2, 2],
            window_size_per_stage=[8, 4, 3, 2],
            global_attention_blocks=[2],
            initializer_range=0.2,
        ),
        backbone_channel_list=[40, 32, 24, 16],
        backbone_feature_sizes=[[16, 16], [8, 8], [4, 4]],
        fpn_hidden_size=16,
        initializer_range=0.2,
    ),
    prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=16, mask_input_channels=8),
    mask_decoder_config=dict(SAM_OVERRIDES["mask_decoder_config"]),
    initializer_range=0.2,  # the masks' logits of order one, not 1e-2
)

CASES = {"sam2": ("sam2", SAM2_OVERRIDES, {"model_class": "Sam2Model"})}
