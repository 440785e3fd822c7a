"""The onnxruntime-genai model type of mobius-text's decoders (``genai_config.json``'s ``model.type``).

The families checked in the generator are written as themselves; every other one
(including those sharing or deriving from their config classes) runs as the
generator's generic decoder, which core writes for ``genai_type`` None.
"""

from __future__ import annotations

import pytest

from mobius.genai import GENERIC_DECODER_TYPE
from mobius_text.models.llama import GENAI_TYPES, LlamaConfig
from mobius_text.models.qwen import QwenConfig

SIZES = dict(
    vocab_size=8,
    hidden_size=8,
    intermediate_size=8,
    num_hidden_layers=1,
    num_attention_heads=1,
    num_key_value_heads=1,
    head_dim=8,
)


@pytest.mark.parametrize("model_type", sorted(GENAI_TYPES))
def test_checked_families_are_written_as_themselves(model_type):
    assert LlamaConfig(model_type=model_type, **SIZES).genai_type == model_type


@pytest.mark.parametrize("model_type", ["apertus", "ministral", "vaultgemma", "mixtral", "cwm"])
def test_other_families_run_as_the_generic_decoder(model_type):
    assert LlamaConfig(model_type=model_type, **SIZES).genai_type is None


def test_a_shared_config_class_answers_by_model_type():
    assert QwenConfig(model_type="qwen3", **SIZES).genai_type == "qwen3"
    assert QwenConfig(model_type="qwen2", **SIZES).genai_type == "qwen2"
    assert QwenConfig(model_type="apertus", **SIZES).genai_type is None
    assert GENERIC_DECODER_TYPE == "llama"
