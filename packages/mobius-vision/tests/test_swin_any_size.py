"""Swin backbones for heads whose graph takes any image size (MaskFormer, Mask2Former), against
transformers' ``SwinBackbone`` and ``MaskFormerSwinBackbone``.

Each case builds one graph of the backbone (``backbone(..., any_size=True)``), fills it with a
perturbed transformers backbone's weights and compares every feature map on two random images
at each of several sizes (max abs diff <= 1e-4, relative above a scale of 1): sides no patch,
window or merge divides, so every stage is padded and its shift mask made at its own size.
"""

from __future__ import annotations

import pytest
from segmentation_parity_cases.upernet import SWIN
from transformers import AutoConfig

from mobius.errors import ConfigError
from mobius_vision.testing._segmentation_parity import check_backbone_parity

#: UperNet's Swin (window 4 on 64x64 pixels: stage grids 16, 8, 4, 2, the last padded to the
#: window); at 45x70, 12x18, 6x9, 3x5, 2x3: odd merges and padding everywhere.
SIZES = ((64, 64), (45, 70), (32, 96))

CASES = {
    "swin-any-size": (
        "swin",
        dict(SWIN, out_features=["stem", "stage1", "stage2", "stage3", "stage4"]),
    ),
    # MaskFormer's Swin: the norms of stages not returned are in the checkpoint, unread.
    "maskformer-swin-any-size": (
        "maskformer-swin",
        dict(SWIN, out_features=["stage1", "stage3", "stage4"], window_size=3),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_backbone_parity(case, tmp_path):
    model_type, overrides = CASES[case]
    result = check_backbone_parity(
        AutoConfig.for_model(model_type, **overrides), tmp_path, any_size=SIZES
    )
    assert len(result.diffs) == len(SIZES) * len(overrides["out_features"])


def test_absolute_positions_are_refused_at_any_size():
    """transformers adds its absolute table only at the size it was made for."""
    from mobius_vision.models._backbone import backbone
    from mobius_vision.models._backbone_config import backbone_config

    hf_config = AutoConfig.for_model("swin", **dict(SWIN, use_absolute_embeddings=True))
    config = backbone_config(hf_config)
    backbone("swin", config)  # the fixed-size backbone takes it
    with pytest.raises(ConfigError, match="use_absolute_embeddings") as error:
        backbone("swin", config, any_size=True)
    assert "\n" not in str(error.value)
