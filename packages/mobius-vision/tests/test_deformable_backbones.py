"""The backbones of the deformable detectors against transformers' own ``XxxBackbone``.

Each case builds the ``backbone_class`` mobius registers for the config's ``model_type``,
fills it with a perturbed transformers backbone's weights and compares every feature map
on two random images (max abs diff <= 1e-4).
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from mobius_vision.testing._segmentation_parity import check_backbone_parity

CASES = {
    # odd map sizes: the pooled shortcuts' partial windows (ceil_mode)
    "rt_detr_resnet-basic": dict(
        model_type="rt_detr_resnet",
        embedding_size=8,
        hidden_sizes=[8, 16, 24],
        depths=[2, 1, 2],
        layer_type="basic",
        out_features=["stem", "stage1", "stage2", "stage3"],
        image_size=40,
    ),
    "rt_detr_resnet-bottleneck": dict(
        model_type="rt_detr_resnet",
        embedding_size=8,
        hidden_sizes=[16, 32, 32],
        depths=[1, 2, 1],
        layer_type="bottleneck",
        downsample_in_bottleneck=True,
        downsample_in_first_stage=True,
        out_features=["stage1", "stage3"],
        image_size=48,
    ),
    # D-FINE's backbone: light and plain blocks, a learnable affine block, the stem's map too
    "hgnet_v2": dict(
        model_type="hgnet_v2",
        stem_channels=[3, 8, 8],
        stage_in_channels=[8, 16, 16],
        stage_mid_channels=[8, 8, 16],
        stage_out_channels=[16, 16, 24],
        stage_num_blocks=[1, 2, 1],
        stage_downsample=[False, True, True],
        stage_light_block=[False, True, False],
        stage_kernel_size=[3, 5, 3],
        stage_numb_of_layers=[2, 2, 1],
        depths=[1, 2, 1],
        hidden_sizes=[16, 16, 24],
        use_learnable_affine_block=True,
        initializer_range=1.0,
        out_features=["stem", "stage2", "stage3"],
        image_size=48,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_backbone_parity(case, tmp_path):
    overrides = dict(CASES[case])
    hf_config = AutoConfig.for_model(overrides.pop("model_type"), **overrides)
    result = check_backbone_parity(hf_config, tmp_path)
    assert len(result.diffs) == len(hf_config.out_features)
