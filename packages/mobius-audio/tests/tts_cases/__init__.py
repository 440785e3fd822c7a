"""Text-to-audio parity cases of mobius-audio, one module per architecture family.

Each module defines ``CASES``: case name -> (model_type, config overrides, keyword
arguments of ``check_tts_parity``). ``all_cases()`` merges them; a name used twice
is an error.
"""

from __future__ import annotations

from mobius.testing import collect_cases


def all_cases() -> dict[str, tuple]:
    return collect_cases(__name__, __path__)
