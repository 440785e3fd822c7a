"""CLI helpers the audio tests share: a refusal is one line on stderr."""

from __future__ import annotations

import json
import shutil

from mobius.cli import main


def one_line_error(capsys, *args) -> str:
    """Run ``mobius ARGS``, which must fail with exactly one line on stderr; that line."""
    capsys.readouterr()
    code = main([str(arg) for arg in args])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, lines
    return lines[0]


def broken_config_error(capsys, source, tmp_path, change) -> str:
    """The one-line refusal of ``mobius build`` on a copy of ``source`` whose ``config.json``
    dict went through ``change``."""
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    config = json.loads((broken / "config.json").read_text())
    change(config)
    (broken / "config.json").write_text(json.dumps(config))
    return one_line_error(capsys, "build", "--model", broken, tmp_path / "out")
