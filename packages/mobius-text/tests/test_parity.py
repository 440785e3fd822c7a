"""Synthetic parity of every registered mobius-text model type against PyTorch.

Each case (see ``text_parity_cases/``) makes a tiny random HF model with every
parameter perturbed, builds it with the CLI path, and checks fp32 prefill logits
and 8 cached decode steps (max abs diff <= 1e-4, identical greedy tokens) at
batch 1 and at batch 2 with left padding.
"""

from __future__ import annotations

import pytest
from text_parity_cases import TINY, all_cases
from transformers import AutoConfig

from mobius.testing import check_causal_lm_parity

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_causal_lm_parity(case, tmp_path):
    model_type, overrides, *options = CASES[case]
    options = dict(options[0]) if options else {}
    options.pop("model_class", None)  # the registry key the case verifies (BertLMHeadModel)
    # A wrapper's checkpoint (source_class): its case gives the whole composite config.
    base = {} if "source_class" in options else TINY
    if not options.pop("tiny", True):  # a config that rejects TINY's names gives its own
        base = {}
    hf_config = AutoConfig.for_model(model_type, **{**base, **overrides})
    for result in check_causal_lm_parity(hf_config, tmp_path, **options):
        assert len(result.decode_diffs) == 8


def test_every_registered_type_has_a_parity_case():
    """Each registered type has a case in its task's kit: causal LMs here, encoders in
    test_encoder_parity.py, encoder-decoders in test_seq2seq_parity.py, decoders as text
    encoders in test_text_encoder_builds.py, decoder classifiers in test_decoder_classification.py."""
    from decoder_classifier_cases import all_cases as classifier_cases
    from encoder_parity_cases import all_cases as encoder_cases
    from seq2seq_parity_cases import all_cases as seq2seq_cases
    from text_encoder_parity_cases import all_cases as text_encoder_cases

    import mobius_text

    kits = {"causal-lm": CASES, "feature-extraction": encoder_cases(), "seq2seq": seq2seq_cases()}
    kits["text-encoder"] = text_encoder_cases()
    kits["text-classification"] = classifier_cases()
    by_task: dict[str, set[str]] = {}
    for model_type, cls in mobius_text.model_types().items():
        by_task.setdefault(getattr(cls, "task", "causal-lm"), set()).add(model_type)
    assert set(by_task) <= set(kits), f"no parity kit for tasks {set(by_task) - set(kits)}"
    registered = mobius_text.model_types()
    for task, types in by_task.items():
        # A case verifies its model_class where that class is a key of its own (T5EncoderModel).
        covered = {
            rest[-1]["model_class"]
            if rest and isinstance(rest[-1], dict) and rest[-1].get("model_class") in registered
            else model_type
            for model_type, *rest in kits[task].values()
        }
        assert types <= covered, f"{task}: no parity case for {sorted(types - covered)}"
