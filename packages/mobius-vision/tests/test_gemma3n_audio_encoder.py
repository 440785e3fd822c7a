"""Gemma 3n's audio encoder (``models/_gemma3n_audio.py``) against transformers'
``Gemma3nAudioEncoder``: a tiny random encoder with every parameter perturbed, a batch of
two with one padded, attention chunks shorter than the left context (the band crosses
chunks) and a logit cap that bites. (The whole model is checked in test_gemma3n_parity.py.)"""

from __future__ import annotations

import numpy as np
import torch
from transformers.models.gemma3n.configuration_gemma3n import Gemma3nAudioConfig as HFConfig
from transformers.models.gemma3n.modeling_gemma3n import Gemma3nAudioEncoder as HFEncoder

from mobius.components._linear import TransposedParameter
from mobius.testing import PARITY_ATOL, perturb_parameters, run_module
from mobius_vision.models._gemma3n_audio import Gemma3nAudioConfig, Gemma3nAudioEncoder


def test_audio_encoder_matches_transformers():
    hf_config = HFConfig(
        hidden_size=16,
        input_feat_size=16,
        conf_num_hidden_layers=2,
        conf_num_attention_heads=2,
        sscp_conv_channel_size=[8, 4],
        conf_attention_chunk_size=4,
        conf_attention_context_left=5,
        conf_attention_logit_cap=2.0,
    )
    torch.manual_seed(0)
    reference = HFEncoder(hf_config)
    perturb_parameters(reference, 0)
    reference.eval()
    features = np.random.default_rng(0).standard_normal((2, 61, 16)).astype(np.float32)
    valid = np.ones((2, 61), bool)
    valid[1, 40:] = False  # the second clip is shorter
    with torch.no_grad():
        expected = reference(torch.from_numpy(features), torch.from_numpy(~valid))

    encoder = Gemma3nAudioEncoder(Gemma3nAudioConfig.from_hf(hf_config))
    params = {k: v.numpy() for k, v in reference.state_dict().items()}
    for name, parameter in encoder.named_parameters():  # checkpoint [out, in] -> graph [in, out]
        if isinstance(parameter, TransposedParameter):
            params[name] = np.ascontiguousarray(params[name].T)
    got, got_valid = run_module(
        lambda op, f, v: encoder(op, f, v), {"features": features, "valid": valid}, params
    )
    np.testing.assert_array_equal(got_valid, ~expected.audio_mel_mask.numpy())
    assert got.shape == expected.last_hidden_state.shape == (2, 4, 16)
    np.testing.assert_allclose(got, expected.last_hidden_state.numpy(), atol=PARITY_ATOL, rtol=0)
