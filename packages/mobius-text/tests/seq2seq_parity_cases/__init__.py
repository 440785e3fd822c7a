"""Encoder–decoder parity cases of mobius-text, one module per architecture family.

Each module defines ``CASES``: case name -> (model_type, config overrides) or
(model_type, overrides, keyword arguments of ``check_seq2seq_parity``). There is
no shared TINY: encoder–decoder configs name their sizes in too many ways
(``d_model``/``d_ff``/``num_heads`` for T5, ``d_model``/``encoder_layers``... for
BART); each family module keeps its own small base. ``all_cases()`` merges them.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
