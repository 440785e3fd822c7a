"""MkDocs hook: fills the generated parts of the docs at build time, so they never go stale.

Pages mark where generated Markdown goes with an HTML comment:

- ``<!-- mobius:cli -->``: the CLI reference, from ``mobius.cli.make_parser()``;
- ``<!-- mobius:models -->``: the registered model types per package, with the
  parity status recorded in each package's ``SUPPORT.md``;
- ``<!-- mobius:support PACKAGE -->``: that package's ``SUPPORT.md`` table;
- ``<!-- mobius:errors -->``: the "Errors" section of mobius-core's README (the
  error model and its table of cases), kept in one place.

A marker that names something unknown, or a plugin that fails to load, is a
build warning (an error with ``mkdocs build --strict``).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from cli_reference import render_parser
from models_table import render_models, render_support, support_file

log = logging.getLogger("mkdocs.hooks.mobius_docs")

MARKER = re.compile(r"<!--\s*mobius:(?P<what>[a-z]+)(?:\s+(?P<arg>\S+))?\s*-->")
PACKAGES_DIR = Path(__file__).resolve().parents[2] / "packages"


def _cli() -> str:
    from mobius.cli import make_parser

    return render_parser(make_parser())


def _models() -> str:
    from mobius._registry import registry

    text, problems = render_models(registry, PACKAGES_DIR)
    for problem in problems:
        log.warning(problem)
    return text


def _support(package: str | None, page: str) -> str:
    path = support_file(PACKAGES_DIR, package or "")
    if not package or not path.is_file():
        log.warning(f"{page}: no SUPPORT.md for package {package!r}")
        return ""
    return render_support(path)


def _errors(page: str) -> str:
    readme = (PACKAGES_DIR / "mobius-core" / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Errors\n(?P<body>.*?)(?=^## |\Z)", readme, flags=re.M | re.S)
    if match is None:
        log.warning(f"{page}: mobius-core's README has no '## Errors' section")
        return ""
    return match["body"].strip() + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace each marker of the page with its generated Markdown."""

    def replace(match: re.Match) -> str:
        what, arg = match["what"], match["arg"]
        if what == "cli":
            return _cli()
        if what == "models":
            return _models()
        if what == "support":
            return _support(arg, page.file.src_uri)
        if what == "errors":
            return _errors(page.file.src_uri)
        log.warning(f"{page.file.src_uri}: unknown generated section {match[0]}")
        return match[0]

    return MARKER.sub(replace, markdown)
