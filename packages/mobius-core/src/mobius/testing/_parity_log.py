"""An optional log of every parity measurement, to show a refactoring changed no figure.

With ``MOBIUS_PARITY_LOG=path`` set, each parity result that is checked
(``assert_close``) appends one JSON line to ``path``: the test's id and every
field of the result (max abs differences per output and step, the tokens).
Run the same tests before and after a change and compare the two files: a
refactoring that keeps the graphs' arithmetic leaves them equal to the digit.
"""

from __future__ import annotations

import dataclasses
import json
import os


def record_parity(result) -> None:
    """Append ``result`` (a parity dataclass) to the log, if ``MOBIUS_PARITY_LOG`` names one."""
    path = os.environ.get("MOBIUS_PARITY_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    fields = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else vars(result)
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"test": test, **fields}, sort_keys=True, default=str) + "\n")
