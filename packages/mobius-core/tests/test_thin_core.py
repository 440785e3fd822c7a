"""Core stays thin: it imports no domain package, names no model family, and has no import cycle.

The family names are every key the installed domain packages register (their
``registrations.json`` indexes), so a family added to any domain is checked
here without editing this test. Docstrings and comments may name families (they
explain); code and string literals may not.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from mobius.discovery import read_index

SRC = Path(__file__).resolve().parents[1] / "src" / "mobius"
DOMAIN_IMPORTS = ("mobius_text", "mobius_vision", "mobius_audio", "mobius_diffusion")

# Words that are keys of some family but also plain vocabulary of a format core reads,
# each with where it is used and why it is not a family: kept as short as possible.
NOT_FAMILIES = {
    "llama": "onnxruntime-genai's generic decoder class (_genai.py GENERIC_DECODER_TYPE)",
    "clip": "the ONNX operator Clip and numpy's clip, not the CLIP family",
}


def core_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _docstring_lines(tree: ast.Module) -> set[int]:
    """The line numbers covered by docstrings (module, class, function)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_words(path: Path) -> list[tuple[int, str]]:
    """``(line, word)`` of the names and string-literal words of a file, docstrings and comments left out."""
    text = path.read_text(encoding="utf-8")
    docstrings = _docstring_lines(ast.parse(text))
    words = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.start[0] in docstrings:
            continue
        if token.type == tokenize.NAME:
            words.append((token.start[0], token.string))
        elif token.type == tokenize.STRING:
            for word in re.findall(r"[A-Za-z0-9_\-]+", token.string):
                words.append((token.start[0], word))
    return words


def family_names() -> set[str]:
    names: set[str] = set()
    for package in DOMAIN_IMPORTS:
        index = read_index(package)
        assert index is not None, f"{package} has no registrations.json"
        names.update(index)
    return names


def test_core_imports_no_domain_package():
    offenders = []
    for path in core_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                if module.split(".")[0] in DOMAIN_IMPORTS:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} imports {module}")
    assert offenders == []


def test_core_names_no_model_family():
    families = {name.lower() for name in family_names()} - set(NOT_FAMILIES)
    # Short keys that are ordinary words or abbreviations in code are matched whole only.
    offenders = []
    for path in core_files():
        for line, word in code_words(path):
            if word.lower() in families:
                offenders.append(f"{path.relative_to(SRC)}:{line}: {word}")
    assert offenders == [], "model-family names in core's code:\n" + "\n".join(offenders)


def test_the_family_scan_would_see_a_family(tmp_path):
    """The scan is not vacuous: a family key in code is found, the same word in a docstring is not."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""Mentions bert in a docstring."""\nKIND = "bert"  # and bert here\n')
    words = [word for _, word in code_words(sample)]
    assert words.count("bert") == 1
    assert "bert" in {name.lower() for name in family_names()}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Core module -> the core modules it imports (module level and inside functions)."""
    modules = {_module_name(path): path for path in core_files()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                    ).strip(".")
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name and target != "mobius":
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_core_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


@pytest.mark.parametrize("gone", ["_speech.py", "_pipeline.py", "_genai_processor.py"])
def test_domain_modules_left_core(gone):
    assert not (SRC / gone).exists()


DOMAIN_SRC = [
    SRC.parents[2] / f"mobius-{d}" / "src" for d in ("text", "vision", "audio", "diffusion")
]


def test_domain_packages_use_only_public_core_modules():
    """A domain package imports core's public modules only, so core can change its internals."""
    offenders = []
    for src in DOMAIN_SRC:
        for path in sorted(src.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
                private = any(part.startswith("_") for part in module.split("."))
                if module.startswith("mobius.") and private:
                    offenders.append(f"{path.relative_to(src)}:{node.lineno} {module}")
    assert offenders == []
