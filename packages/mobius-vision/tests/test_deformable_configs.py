"""The deformable detectors refuse, in one line naming the setting, the configs they do not
build (rather than building something else)."""

from __future__ import annotations

import pytest
from detection_parity_cases.d_fine import TINY_D_FINE
from detection_parity_cases.rt_detr import TINY_RT_DETR
from transformers import AutoConfig

from mobius.errors import ConfigError
from mobius_vision.models.d_fine import DFineConfig
from mobius_vision.models.rt_detr import RTDetrConfig
from mobius_vision.models.rt_detr_v2 import RTDetrV2Config

REFUSED = {
    "learn_initial_query": (RTDetrConfig, "rt_detr", TINY_RT_DETR, {"learn_initial_query": True}),
    "encoder_in_channels": (
        RTDetrConfig,
        "rt_detr",
        TINY_RT_DETR,
        {"encoder_in_channels": [16, 16, 16]},
    ),
    "decoder_method": (RTDetrV2Config, "rt_detr_v2", TINY_RT_DETR, {"decoder_method": "discrete"}),
    "decoder_n_levels": (RTDetrV2Config, "rt_detr_v2", TINY_RT_DETR, {"decoder_n_levels": 4}),
    "eval_idx": (DFineConfig, "d_fine", TINY_D_FINE, {"eval_idx": 0}),
    "per-level decoder_n_points": (
        DFineConfig,
        "d_fine",
        TINY_D_FINE,
        {"decoder_n_points": [2, 3, 4]},
    ),
}


@pytest.mark.parametrize("setting", sorted(REFUSED))
def test_refused(setting):
    config_class, model_type, tiny, change = REFUSED[setting]
    hf_config = AutoConfig.for_model(model_type, **{**tiny, **change})
    with pytest.raises(ConfigError, match=setting.split()[-1]) as error:
        config_class.from_hf(hf_config)
    assert "\n" not in str(error.value)


def test_uniform_points_list_is_read_as_one_count():
    hf_config = AutoConfig.for_model("d_fine", **{**TINY_D_FINE, "decoder_n_points": [3, 3, 3]})
    assert DFineConfig.from_hf(hf_config).decoder_n_points == 3
    assert hf_config.decoder_n_points == [3, 3, 3]  # the stranger's config is left as it was
