"""The documentation site builds with ``mkdocs build --strict`` and its generated pages are complete.

The build runs in a child process (as ``mkdocs`` would from the command line)
while this process loads the parser and the registry to check against: both
sides import mobius, which takes most of the time.
"""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUPPORT_ROW = re.compile(r"^\| `([^`]+)` \|", re.M)


@dataclass
class Site:
    directory: Path
    parser: argparse.ArgumentParser
    registry: object

    def page(self, name: str) -> str:
        """The main content of a built page (``reference/cli`` -> its index.html)."""
        text = (self.directory / name / "index.html").read_text(encoding="utf-8")
        return text[text.index('role="main"') :]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    directory = tmp_path_factory.mktemp("site")
    build = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
        + ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(directory)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    from mobius._registry import registry
    from mobius.cli import make_parser

    parser = make_parser()
    registry.load_plugins()
    log, _ = build.communicate(timeout=300)
    if build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed ({build.returncode}):\n{log}")
    return Site(directory, parser, registry)


def commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every (nested) subcommand parser."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += commands(sub)
    return found


def section(page: str, anchor: str) -> str:
    """The HTML from the heading with ``id=anchor`` to the next heading of any level."""
    start = page.index(f'id="{anchor}"')
    following = re.search(r"<h[1-6][ >]", page[start:])
    return page[start : start + following.start()] if following else page[start:]


def test_cli_reference_documents_every_command_and_option(site):
    page = site.page("reference/cli")
    subcommands = commands(site.parser)
    assert len(subcommands) > 1
    for parser in subcommands:
        anchor = parser.prog.replace(" ", "-")
        assert f'id="{anchor}"' in page, f"no section for {parser.prog!r}"
        body = section(page, anchor)
        assert f"usage: {html.escape(parser.prog)}" in body, parser.prog
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                for name in action.choices:
                    assert f"<code>{name}</code>" in body, f"{parser.prog}: command {name}"
                continue
            names = action.option_strings or [action.metavar or action.dest]
            for name in names:
                assert f"<code>{html.escape(name)}" in body, f"{parser.prog}: {name}"


def test_models_page_lists_every_registered_key_with_its_task(site):
    page = site.page("reference/models")
    grouped = site.registry.by_package()
    assert grouped, "no model types registered: is mobius-text installed?"
    for package, entries in grouped.items():
        body = section(page, package)
        for entry in entries:
            row = re.search(
                rf"<tr>\s*<td><code>{re.escape(html.escape(entry.key))}</code></td>\s*"
                rf"<td>([^<]*)</td>",
                body,
            )
            assert row, f"{package}: {entry.key} is not listed"
            assert row[1] == entry.task, entry.key


def test_models_page_says_which_packages_register_nothing(site):
    page = site.page("reference/models")
    empty = set(site.registry.plugins.values()) - set(site.registry.by_package())
    for package in empty:
        assert "registers no model types yet" in section(page, package), package


def test_models_page_shows_recorded_parity_status(site):
    page = site.page("reference/models")
    support = (ROOT / "packages/mobius-text/SUPPORT.md").read_text(encoding="utf-8")
    # A registered key's row: the one in its task's table, else its verified one, else its
    # first; a key registered by class name (``BertLMHeadModel``) is in the class column.
    rows = {}
    task = None
    for line in support.splitlines():
        if line.startswith("## "):
            task = line.rsplit("(", 1)[-1].rstrip(")") if line.endswith(")") else None
        row = re.match(r"^\| `([^`]+)` \| `([^`]*)` \| ([^|]*?) \|", line)
        for name in {row[1], row[2]} if row else ():
            rows.setdefault(name, []).append((task, row[3]))

    def status(key: str, task: str) -> str:
        found = rows.get(key)
        assert found, f"{key} has no row in SUPPORT.md"
        own = [s for t, s in found if t == task] or [s for _, s in found if "verified" in s]
        return (own or [found[0][1]])[0]

    body = section(page, "mobius-text")
    for entry in site.registry.by_package()["mobius-text"]:
        expected = status(entry.key, entry.task)
        row = re.search(rf"<code>{re.escape(entry.key)}</code></td>(.*?)</tr>", body, re.S)
        assert row and html.escape(expected, quote=False) in row[1], entry.key


def test_coverage_page_includes_the_support_table(site):
    page = site.page("reference/text-coverage")
    support = (ROOT / "packages/mobius-text/SUPPORT.md").read_text(encoding="utf-8")
    model_types = SUPPORT_ROW.findall(support)
    assert len(model_types) > 100
    for model_type in model_types:
        assert f"<code>{html.escape(model_type)}</code>" in page, model_type
