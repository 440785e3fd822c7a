"""Render the registered models, per package, with the parity status each package recorded.

The registry (``mobius._registry.registry``) says what is registered; a package's
``SUPPORT.md`` (written by its ``scripts/support_table.py`` from a parity run)
says what was verified. The docs read the recorded results and never rerun
parity: that takes far longer than a docs build should.
"""

from __future__ import annotations

import re
from pathlib import Path

# A SUPPORT.md row: | `model_type` | `reference class` (transformers or diffusers) | status |
ROW = re.compile(
    r"^\|\s*`(?P<key>[^`]+)`\s*\|\s*`(?P<hf_class>[^`]*)`\s*\|\s*(?P<status>.*?)\s*\|\s*$"
)

NO_RESULT = "no recorded parity result (run the package's `scripts/support_table.py`)"


def support_file(packages_dir: Path, package: str) -> Path:
    """Where a distribution keeps its recorded parity results."""
    return packages_dir / package / "SUPPORT.md"


# A SUPPORT.md section that names its task: ``## Causal LMs (causal-lm)``.
SECTION = re.compile(r"^##\s.*\((?P<task>[a-z0-9-]+)\)\s*$")


def read_support(path: Path) -> dict[str, list[tuple[str | None, str, str]]]:
    """``name -> [(task, reference class, status)...]`` from a SUPPORT.md's tables: a row under
    its model_type and under its reference class (a type registered by class name,
    ``BertLMHeadModel``, has its model_type's row); the task where the section names one.
    ``{}`` if absent."""
    if not path.is_file():
        return {}
    rows: dict[str, list[tuple[str | None, str, str]]] = {}
    task = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = SECTION.match(line)
            task = section["task"] if section else None
        match = ROW.match(line)
        if match:
            row = (task, match["hf_class"], match["status"].split("|")[0].strip())
            rows.setdefault(match["key"], []).append(row)
            if match["hf_class"] != match["key"]:
                rows.setdefault(match["hf_class"], []).append(row)
    return rows


def status_of(support: dict, key: str, task: str) -> tuple[str, str]:
    """``(reference class, status)`` of a registered ``key`` of ``task``: its row in that task's
    table, else its own verified row ("built as ...: see ..." rows point elsewhere), else its
    first row."""
    rows = support.get(key, [])
    ranked = [r for r in rows if r[0] == task] or [r for r in rows if r[2].startswith("verified")]
    found = (ranked or rows or [(None, "", NO_RESULT)])[0]
    return found[1], found[2]


def render_models(registry, packages_dir: Path) -> tuple[str, list[str]]:
    """The models section of the docs and the problems worth a build warning.

    Every package that the ``mobius.plugins`` entry point finds gets a section,
    those that register nothing included; plugins that failed to load are
    listed, and reported as problems.
    """
    grouped = registry.by_package()
    # Packages with models first, then those that register nothing yet.
    packages = sorted(
        set(grouped) | set(registry.plugins.values()), key=lambda p: (p not in grouped, p)
    )
    problems = [
        f"plugin {dist} failed to load: {err}" for dist, err in registry.plugin_errors.items()
    ]
    total = sum(len(entries) for entries in grouped.values())
    lines = [f"{total} model types registered by {len(grouped)} of {len(packages)} packages.", ""]
    for package in packages:
        entries = grouped.get(package, [])
        lines += [f"## {package}", ""]
        if not entries:
            lines += [
                f"`{package}` installs and is discovered through the `mobius.plugins` entry "
                "point, but registers no model types yet.",
                "",
            ]
            continue
        support = read_support(support_file(packages_dir, package))
        verified = sum(status_of(support, e.key, e.task)[1].startswith("verified") for e in entries)
        lines += [
            f"{len(entries)} model types, {verified} verified by synthetic parity "
            f"(recorded in `packages/{package}/SUPPORT.md`).",
            "",
            "| model type | task | reference class | parity |",
            "|---|---|---|---|",
        ]
        for entry in entries:
            hf_class, status = status_of(support, entry.key, entry.task)
            hf_cell = f"`{hf_class}`" if hf_class else ""
            lines.append(f"| `{entry.key}` | {entry.task} | {hf_cell} | {status} |")
        lines.append("")
    if problems:
        lines += ["## Plugins that failed to load", ""]
        lines += [f"- {problem}" for problem in problems]
        lines.append("")
    return "\n".join(lines), problems


def render_support(path: Path) -> str:
    """A package's SUPPORT.md as a page body: its own title dropped, the rest as written."""
    text = path.read_text(encoding="utf-8")
    return re.sub(r"\A# .*\n", "", text).lstrip("\n")
