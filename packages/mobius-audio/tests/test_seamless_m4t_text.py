"""SeamlessM4T v1 and v2 text-to-text against PyTorch, on a right-padded batch of two texts.

A tiny random ``SeamlessM4T(v2)ForTextToText`` (every parameter perturbed) is built
with the CLI (its ``architectures`` picks the text-to-text registration); the
encoder's ``last_hidden_state``, the decoder's prefill and 8 greedy steps through
both caches must be within 1e-4 of PyTorch, the greedy streams equal to
transformers' ``generate``. A whole ``SeamlessM4TModel`` checkpoint (the hub's
layout) builds text-to-text with ``--model-type``, its speech parts named in one note.
"""

from __future__ import annotations

import logging

import pytest
from test_seamless_m4t_parity import TINY
from transformers import AutoConfig

from mobius.errors import ConfigError
from mobius.testing import build_with_cli, check_seq2seq_parity
from mobius_audio.models.seamless_m4t_text import SeamlessM4TForTextToText, SeamlessM4TTextConfig

# config overrides, seed: untied heads (tied, this tiny decoder repeats one token); the
# speech encoder's settings do not reach text-to-text
CASES = {
    "seamless_m4t": (dict(TINY, tie_word_embeddings=False), 0),
    "seamless_m4t_v2": (dict(TINY, tie_word_embeddings=False, activation_function="gelu"), 3),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_seamless_m4t_text_to_text_parity(model_type, tmp_path):
    overrides, seed = CASES[model_type]
    config = AutoConfig.for_model(model_type, **overrides)
    (result,) = check_seq2seq_parity(config, tmp_path, lengths=(7, 4), seed=seed, eps=("cpu",))
    assert len(result.decode_diffs) == 8
    tokens = {t for step in result.onnx_tokens for t in step}
    assert len(tokens) > 1, "degenerate greedy streams: the check would prove little"


def test_whole_model_checkpoint_builds_text_to_text_by_model_type(tmp_path, caplog):
    """The hub's layout: a ``SeamlessM4TModel`` (tied embeddings saved once as ``shared``).
    ``--model-type`` picks text-to-text; the note names the parts left out; the graphs match
    ``SeamlessM4TForTextToText`` loaded from the same checkpoint."""
    import torch
    from transformers import SeamlessM4TForTextToText, SeamlessM4TModel

    from mobius.testing import OnnxSeq2Seq, perturb_parameters
    from mobius.testing._seq2seq_parity import compare_seq2seq

    config = AutoConfig.for_model("seamless_m4t", **TINY)
    torch.manual_seed(0)
    model = SeamlessM4TModel(config)
    perturb_parameters(model, 0)
    model.save_pretrained(tmp_path / "hf")
    model_type = ("--model-type", "SeamlessM4TForTextToText")
    with caplog.at_level(logging.WARNING, logger="mobius"):
        package = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--ep", "cpu", *model_type)
    notes = [r.getMessage() for r in caplog.records if "speech parts" in r.getMessage()]
    assert len(notes) == 1 and all(
        part in notes[0] for part in ("speech_encoder (", "t2u_model (", "vocoder (")
    ), notes
    reference = SeamlessM4TForTextToText.from_pretrained(
        tmp_path / "hf", attn_implementation="eager", trust_remote_code=False
    ).eval()
    result = compare_seq2seq(reference, OnnxSeq2Seq(package), [6, 3], 4, 0, generate=False)
    result.ep = "cpu"
    result.assert_close()


def test_text_to_text_refuses_another_model_type():
    config = AutoConfig.for_model("bart", vocab_size=64, d_model=32)
    with pytest.raises(ConfigError, match="not 'bart'"):
        SeamlessM4TTextConfig.from_hf(config)


@pytest.mark.parametrize(
    "saved_as",
    ["shared.weight", "text_encoder.embed_tokens.weight", "text_decoder.embed_tokens.weight"],
)
def test_a_tied_table_saved_under_any_tied_name_fills_both_stacks(saved_as):
    """transformers ties ``shared``, both stacks' tables and ``lm_head``; a checkpoint keeps one name."""
    config = SeamlessM4TTextConfig.from_hf(AutoConfig.for_model("seamless_m4t", **TINY))
    model = SeamlessM4TForTextToText(config)
    table, extra = object(), {"lm_head.weight": object()}
    weights = model.sanitize({saved_as: table, **extra})
    assert weights == {
        "text_encoder.embed_tokens.weight": table,
        "text_decoder.embed_tokens.weight": table,
    }
