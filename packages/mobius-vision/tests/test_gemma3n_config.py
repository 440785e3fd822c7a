"""Gemma 3n's tower settings come from a timm architecture name and ``model_args``: what
mobius does not build is refused with a one-line ConfigError naming it (no timm needed)."""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from mobius.errors import ConfigError
from mobius_vision.models._mobilenetv5 import MobileNetV5Config
from mobius_vision.models.gemma3n import Gemma3nConfig


def hf_config(vision=None, **fields):
    vision = {"model_args": {"channel_multiplier": 0.125}, **(vision or {})}
    text = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    text.update(head_dim=8, vocab_size=128, vocab_size_per_layer_input=96, laurel_rank=4)
    text.update(layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0)
    text.update(activation_sparsity_pattern=[0.0, 0.0], hidden_size_per_layer_input=8)
    fields = {"vision_soft_tokens_per_image": 256, **fields}
    return AutoConfig.for_model("gemma3n", text_config=text, vision_config=vision, **fields)


def test_the_hub_layout_reads():
    config = Gemma3nConfig.from_hf(hf_config())
    assert config.vision == MobileNetV5Config(channel_multiplier=0.125)
    assert config.vision_embedder.vocab_offset == 262_144
    assert config.audio_embedder.vocab_offset == 262_272
    assert config.text.model_type == "gemma3n_text"


@pytest.mark.parametrize(
    ("vision", "fields", "message"),
    [
        ({"architecture": "resnet50"}, {}, "vision architecture 'resnet50' is not"),
        ({"hidden_size": 1024}, {}, "vision hidden_size 1024 is not the 2048"),
        ({"model_args": {"depth": 3}}, {}, "model_args 'depth' is not supported"),
        ({"model_args": {"channel_multiplier": -1}}, {}, "channel_multiplier=-1 is not positive"),
        ({"model_args": {"msfa_output_resolution": "4"}}, {}, "resolution='4' is not positive"),
        ({}, {"vision_soft_tokens_per_image": 100}, "100 is not the tower's 16x16"),
        ({"vocab_offset": -5}, {}, "vision_config.vocab_offset -5 is not a count"),
    ],
)
def test_what_mobius_does_not_build_is_refused(vision, fields, message):
    with pytest.raises(ConfigError, match=message):
        Gemma3nConfig.from_hf(hf_config(vision, **fields))
