"""Encoder parity cases of mobius-text, one module per architecture family.

Each module defines ``CASES``: case name -> (model_type, config overrides over
``TINY``) or (model_type, overrides, keyword arguments of
``check_encoder_parity``, such as the ``heads`` the family has). ``all_cases()``
merges them; a name used twice is an error. An override of :data:`OMIT` drops that
``TINY`` field (a config that refuses it, as Funnel's read-only ``num_hidden_layers``).
"""

from __future__ import annotations

from mobius.testing import collect_cases

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    pad_token_id=0,
)

#: an override value that leaves the field out of the config (see :func:`config_fields`)
OMIT = object()


def config_fields(overrides: dict) -> dict:
    """``TINY`` with a case's overrides, the fields overridden with :data:`OMIT` left out."""
    return {k: v for k, v in {**TINY, **overrides}.items() if v is not OMIT}


# The span and choice heads on one build each: two questions of two choices (four rows), on
# the default build only (the heads are one Linear over what the other cases check per ep).
SPAN_AND_CHOICE = {
    "heads": ("question-answering", "multiple-choice"),
    "lengths": (7, 4, 6, 3),
    "eps": ("default",),
}


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
