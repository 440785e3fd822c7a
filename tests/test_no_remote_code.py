"""No remote code: a checkpoint or package that names its own Python never gets it run.

transformers imports a repository's ``*.py`` files when ``auto_map`` names them and a
loader is called with ``trust_remote_code=True``; left unset, it asks on stdin. mobius
passes ``False`` to every loader, and a build drops ``auto_map`` from the JSON files
it writes into a package, saying so in the build log. Each hostile ``*.py`` here writes
a marker file when imported: the marker must never appear, even with "y" on stdin.
"""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.testing import tiny_tokenizer
from mobius_text.testing import write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("offline_hub")


def hostile_code(directory: Path, module: str, marker: Path) -> None:
    """``<module>.py`` in ``directory``: importing it writes ``marker``."""
    (directory / f"{module}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('remote code ran')\n"
    )


def add_auto_map(directory: Path, marker: Path) -> None:
    """Point ``tokenizer_config.json`` and ``config.json`` of ``directory`` at hostile code."""
    hostile_code(directory, "tokenization_evil", marker)
    hostile_code(directory, "configuration_evil", marker)
    path = directory / "tokenizer_config.json"
    tokenizer_config = json.loads(path.read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    path.write_text(json.dumps(tokenizer_config))
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    path.write_text(json.dumps(config))


@pytest.fixture
def hostile_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny llama with a tokenizer whose config files name hostile code; and the marker."""
    model = write_tiny_llama(tmp_path / "model")
    tiny_tokenizer(64, {"<s>": 1, "</s>": 2}).save_pretrained(model)
    marker = tmp_path / "marker"
    add_auto_map(model, marker)
    return model, marker


def test_a_built_package_keeps_no_auto_map(hostile_checkpoint, tmp_path, capsys) -> None:
    model, marker = hostile_checkpoint
    out = tmp_path / "out"
    assert main(["build", "--model", str(model), str(out), "--ep", "cpu"]) == 0
    err = capsys.readouterr().err
    for name in ("config.json", "tokenizer_config.json"):
        assert f"note: {name}: auto_map dropped" in err, err
    files = sorted(out.rglob("*.json"))
    assert {p.name for p in files} >= {"config.json", "tokenizer_config.json"}
    for path in files:
        assert "auto_map" not in path.read_text(), path
    # what the runner needs is still there
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    assert not list(out.glob("*.py")) and not marker.exists()


def point_at_own_code(package: Path, marker: Path, via: str) -> None:
    """Make a built ``package`` one that transformers can only load with its own code: a
    model type transformers lacks, and ``auto_map`` in ``config.json`` or (with no
    ``tokenizer_class``) in ``tokenizer_config.json``. Left unset, ``trust_remote_code``
    makes transformers ask on stdin, and "y" runs the code (checked by hand)."""
    hostile_code(package, "configuration_evil" if via == "config" else "tokenization_evil", marker)
    config = json.loads((package / "config.json").read_text())
    config["model_type"] = "my_private_arch"
    tokenizer_config = json.loads((package / "tokenizer_config.json").read_text())
    if via == "config":
        config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    else:
        tokenizer_config.pop("tokenizer_class", None)
        tokenizer_config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (package / "config.json").write_text(json.dumps(config))
    (package / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))


@pytest.mark.parametrize("via", ["config", "tokenizer"])
def test_generate_never_runs_a_package_s_own_code(via, tmp_path, capsys, monkeypatch) -> None:
    """A package edited after its build to need its own code, with "y" waiting on stdin."""
    model = write_tiny_llama(tmp_path / "model")
    tiny_tokenizer(64, {"<s>": 1, "</s>": 2}).save_pretrained(model)
    out = tmp_path / "out"
    assert main(["build", "--model", str(model), str(out), "--ep", "cpu", "-q"]) == 0
    marker = tmp_path / "marker"
    point_at_own_code(out, marker, via)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 4))
    code = main(["generate", str(out), "w3 w4 w5", "--no-chat-template", "--max-new-tokens", "2"])
    captured = capsys.readouterr()
    assert not marker.exists()
    assert sys.stdin.read() == "y\n" * 4, "a loader read stdin"
    assert "[y/N]" not in captured.out + captured.err  # transformers' question
    # It runs on transformers' own classes, or fails in one line where only the code would do.
    assert "Traceback" not in captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("mobius: error:")]
    if via == "config":  # the tokenizer's own class is named: the config is not needed
        assert code == 0 and captured.out.strip(), captured
    else:
        assert code == 1 and len(errors) == 1 and "tokenizer" in errors[0], captured


def _loader_calls(path: Path):
    """The ``X.from_pretrained(...)`` calls of a source file."""
    text = path.read_text(encoding="utf-8")
    if "from_pretrained" not in text:
        return
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "from_pretrained"
        ):
            yield node


#: Loaders that have no remote-code path to close: diffusers' model classes (a registered
#: class loads its own weights; ``trust_remote_code`` is only for its pipelines and AutoModel).
NO_REMOTE_CODE_PATH = {("mobius-diffusion", "validate.py")}


def test_every_loader_refuses_remote_code() -> None:
    """Every ``from_pretrained`` in the packages' sources says ``trust_remote_code=False``
    (set, transformers never asks on stdin either)."""
    unsafe = []
    calls = 0
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        package = path.relative_to(ROOT).parts[1]
        if (package, path.name) in NO_REMOTE_CODE_PATH:
            continue
        for call in _loader_calls(path):
            calls += 1
            flag = {k.arg: k.value for k in call.keywords}.get("trust_remote_code")
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                unsafe.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert calls > 10  # the scan found the loaders
    assert not unsafe, f"from_pretrained without trust_remote_code=False: {unsafe}"
