"""The backbones under the depth heads against transformers' own ``XxxBackbone`` classes.

A tiny ``Dinov2Backbone`` (every parameter perturbed) and mobius' module for it, built
alone as a graph and filled with the weights transformers saves, must give the same ``feature_maps``
(max abs diff <= 1e-4) on two random images of a size other than the position table's
(the positions are interpolated), as maps (``reshape_hidden_states``) or as tokens.
"""

from __future__ import annotations

from fnmatch import fnmatch

import numpy as np
import pytest
import torch
from depth_parity_cases.depth_anything import DINOV2_BACKBONE
from safetensors.numpy import load_file
from transformers import AutoConfig, Dinov2Backbone

from mobius.components import TransposedParameter
from mobius.testing import PARITY_ATOL, perturb_parameters, run_module
from mobius_vision.models._backbone import backbone
from mobius_vision.models.dinov2 import Dinov2BackboneConfig

CASES = {
    "dinov2-maps": dict(out_indices=[0, 2, 4], reshape_hidden_states=True, image=(24, 36)),
    "dinov2-tokens-no-norm": dict(
        out_indices=[1, 4], reshape_hidden_states=False, apply_layernorm=False, image=(40, 32)
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dinov2_backbone_matches_transformers(case, tmp_path):
    options = dict(CASES[case])
    height, width = options.pop("image")
    hf_config = AutoConfig.for_model(**dict(DINOV2_BACKBONE, **options))
    torch.manual_seed(0)
    reference = Dinov2Backbone(hf_config).eval()
    perturb_parameters(reference, 0)
    pixels = np.random.default_rng(0).standard_normal((2, 3, height, width)).astype(np.float32)
    with torch.no_grad():
        expected = [m.numpy() for m in reference(torch.from_numpy(pixels)).feature_maps]

    module = backbone("dinov2", Dinov2BackboneConfig.from_hf(hf_config))
    # The checkpoint's names (transformers renames its modules' keys when it saves).
    reference.save_pretrained(tmp_path)
    params = load_file(tmp_path / "model.safetensors")
    for name in list(params):  # the tensors the graph does not read
        if any(fnmatch(name, pattern) for pattern in module.unused):
            del params[name]
    for name, parameter in module.named_parameters():  # checkpoint [out, in] -> graph [in, out]
        if isinstance(parameter, TransposedParameter):
            params[name] = np.ascontiguousarray(params[name].T)
    got = run_module(lambda op, x: module(op, x), {"pixel_values": pixels}, params)

    assert len(got) == len(expected)
    for index, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.shape == theirs.shape, f"map {index}: {ours.shape} != {theirs.shape}"
        assert np.abs(theirs[1] - theirs[0]).max() > 1e-3, f"map {index} ignores the image"
        assert np.abs(ours - theirs).max() <= PARITY_ATOL, f"map {index} differs"


def test_a_family_without_a_backbone_is_refused():
    from mobius.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a backbone"):
        backbone("vit", None)
