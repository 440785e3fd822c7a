"""Encoder and encoder-decoder families built as causal LMs (``BertLMHeadModel``,
``BartForCausalLM``...): ONNX Runtime GenAI generates what transformers does, and configs
that are not causal LMs are refused by name. Parity itself is in test_parity.py
(``text_parity_cases/encoders_as_decoders.py`` and ``seq2seq_decoders.py``)."""

from __future__ import annotations

import json
import sys

import pytest
from text_parity_cases import TINY
from transformers import AutoConfig

from mobius.errors import ConfigError
from mobius.testing import build_with_cli, genai_greedy, make_random_model, torch_greedy

PROMPT = [5, 17, 42, 99, 6, 63, 8, 120, 33, 77]
NEW_TOKENS = 12
IDS = dict(bos_token_id=1, eos_token_id=2)
SEQ2SEQ = dict(d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128)

GENAI_CASES = {
    # learned positions read at position_ids (the generator feeds them)
    "bert": ("bert", dict(is_decoder=True, **IDS)),
    # positions from the tokens before these, counted on the mask (tiny random BART and
    # mBART repeat one token; Pegasus does not)
    "pegasus": ("pegasus", dict(SEQ2SEQ, forced_eos_token_id=None, **IDS)),
    # rotary positions likewise
    "roformer": ("roformer", dict(is_decoder=True, **IDS)),
}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="onnxruntime-genai needs Python >= 3.11")
@pytest.mark.parametrize("ep", ["cpu", "default"])
@pytest.mark.parametrize("case", sorted(GENAI_CASES))
def test_genai_generates_like_transformers(case, ep, tmp_path):
    """``--ep cpu`` runs GroupQueryAttention with one buffer shared by past and present (the
    cache at its full length): positions must not be read off the cache's length."""
    model_type, overrides = GENAI_CASES[case]
    config = AutoConfig.for_model(
        model_type, **{**TINY, "max_position_embeddings": 32, **overrides}
    )
    model = make_random_model(config)
    model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "out", "--ep", ep, "--runtime", "ort-genai")
    assert json.loads((out / "genai_config.json").read_text())["model"]["eos_token_id"] == 2
    expected = torch_greedy(model, PROMPT, NEW_TOKENS, eos="suppress")
    assert genai_greedy(out, PROMPT, NEW_TOKENS) == expected
    assert len(set(expected)) > 3  # not one token repeated, which a broken cache could match


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(is_decoder=False), "needs is_decoder=True"),
        (dict(is_decoder=True, add_cross_attention=True), "add_cross_attention=True"),
    ],
)
def test_encoder_config_that_is_not_a_causal_lm_is_refused(overrides, message):
    from mobius_text.models.roberta import RobertaForCausalLM

    config = AutoConfig.for_model("roberta", **overrides)
    with pytest.raises(ConfigError, match=message):
        RobertaForCausalLM.config_class.from_hf(config)


def test_encoder_build_of_a_decoder_config_names_the_causal_class():
    from mobius_text.models.roberta import RobertaForFeatureExtraction

    config = AutoConfig.for_model("roberta", is_decoder=True)
    with pytest.raises(ConfigError, match="RobertaForCausalLM"):
        RobertaForFeatureExtraction.config_class.from_hf(config)
