"""Synthetic parity of every depth-estimation type against transformers' PyTorch.

Each case (see ``depth_parity_cases/``) makes a tiny random
``AutoModelForDepthEstimation`` with every parameter perturbed, builds it with the CLI
(``--ep default`` and ``cpu``), and checks ``predicted_depth`` (and a family's extra
outputs) at fp32 on a batch of two random images (max abs diff <= 1e-4, relative to the
depth's scale above 1).
"""

from __future__ import annotations

import pytest
from depth_parity_cases import all_cases
from transformers import AutoConfig

from mobius import registry
from mobius_vision.testing import check_depth_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_depth_parity(case, tmp_path):
    model_type, overrides, options = CASES[case]
    hf_config = AutoConfig.for_model(model_type, **overrides)
    results = check_depth_parity(hf_config, tmp_path, **options)
    assert results and all(r.diffs for r in results)


def test_every_depth_type_has_a_parity_case():
    depth_types = {e.key for e in registry.entries() if e.task == "depth-estimation"}
    covered = {model_type for model_type, *_ in CASES.values()}
    assert depth_types, "no depth-estimation type is registered"
    assert not depth_types - covered, f"no depth parity case for {sorted(depth_types - covered)}"


def test_unbuildable_configs_are_refused_in_one_line():
    from mobius.errors import ConfigError
    from mobius_vision.models.depth_anything import DepthAnythingConfig
    from mobius_vision.models.dpt import DptConfig

    refusals = [
        (
            DptConfig,
            AutoConfig.for_model("dpt", is_hybrid=True, neck_ignore_stages=[0]),
            "DPT-Hybrid's neck_ignore_stages",
        ),
        (DptConfig, AutoConfig.for_model("dpt", is_hybrid=True), "must start with the BiT stage"),
        (
            DepthAnythingConfig,
            AutoConfig.for_model("depth_anything", backbone_config=dict(model_type="vit")),
            "no vit backbone",
        ),
        (
            DepthAnythingConfig,
            AutoConfig.for_model("depth_anything", reassemble_factors=[4, 2, 1, 0.3]),
            "reassemble factor 0.3",
        ),
    ]
    for config_class, hf_config, message in refusals:
        with pytest.raises(ConfigError, match=message) as error:
            config_class.from_hf(hf_config)
        assert "\n" not in str(error.value)
