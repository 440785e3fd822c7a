"""Gemma 4's audio encoder (``models/_gemma4_audio.py``) against transformers'
``Gemma4AudioModel``: a tiny random encoder with every parameter perturbed, a batch of two
with one padded, attention chunks shorter than the left context (the band crosses
chunks), with and without frames ahead, a logit cap that bites, clipped linears. (The
whole ``gemma4`` build with it: ``test_gemma4_parity.py``.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig as HFConfig
from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioModel

from mobius.components._linear import TransposedParameter
from mobius.testing import PARITY_ATOL, perturb_parameters, run_module
from mobius_vision.models._gemma4_audio import Gemma4AudioConfig, Gemma4AudioEncoder


@pytest.mark.parametrize("right", [0, 2])  # the checkpoints' 0; 2 sees a frame ahead
def test_audio_encoder_matches_transformers(right):
    hf_config = HFConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        subsampling_conv_channels=[8, 4],
        conv_kernel_size=3,
        attention_chunk_size=3,
        attention_context_left=5,
        attention_context_right=right,
        attention_logit_cap=2.0,
        output_proj_dims=24,
    )
    torch.manual_seed(0)
    reference = Gemma4AudioModel._from_config(hf_config, attn_implementation="eager")
    perturb_parameters(reference, 0)
    reference.eval()
    features = np.random.default_rng(0).standard_normal((2, 61, 8)).astype(np.float32)
    valid = np.ones((2, 61), bool)
    valid[1, 37:] = False  # the second clip is shorter
    with torch.no_grad():
        expected = reference(torch.from_numpy(features), torch.from_numpy(valid))
    expected_valid = expected.attention_mask.numpy()

    encoder = Gemma4AudioEncoder(Gemma4AudioConfig.from_hf(hf_config))
    params = {k: v.numpy() for k, v in reference.state_dict().items()}
    params = {k: v for k, v in params.items() if not k.endswith("inv_timescales")}
    for name, parameter in encoder.named_parameters():  # checkpoint [out, in] -> graph [in, out]
        if isinstance(parameter, TransposedParameter):
            params[name] = np.ascontiguousarray(params[name].T)
    got, got_valid = run_module(
        lambda op, f, v: encoder(op, f, v), {"features": features, "valid": valid}, params
    )
    np.testing.assert_array_equal(got_valid, expected_valid)
    states = expected.last_hidden_state.numpy()
    assert got.shape == states.shape == (2, 16, 24)
    # padded frames carry no meaning (transformers drops them): real frames only
    np.testing.assert_allclose(got[got_valid], states[expected_valid], atol=PARITY_ATOL, rtol=0)
