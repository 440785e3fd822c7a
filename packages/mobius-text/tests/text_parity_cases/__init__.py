"""Parity cases of mobius-text, one module per architecture family.

Each module defines ``CASES``: case name -> (model_type, config overrides over
``TINY``) or (model_type, overrides, keyword arguments of
``check_causal_lm_parity``). ``all_cases()`` merges them; a name used twice is
an error.
"""

from __future__ import annotations

from mobius.testing import collect_cases

TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    pad_token_id=0,
)


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
