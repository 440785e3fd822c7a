"""Shared pieces of the packages' ``scripts/support_table.py``: parity results and verified.json."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def parity_results(tests: list[Path], junit_xml: Path | None) -> dict[str, dict[str, bool]]:
    """Test function -> {case name: passed}, from a JUnit XML report (running ``tests`` if none).

    A case passes only when it neither failed, errored nor was skipped.
    """
    with tempfile.TemporaryDirectory() as tmp:
        if junit_xml is None:
            junit_xml = Path(tmp) / "parity.xml"
            subprocess.run(
                [sys.executable, "-m", "pytest", *map(str, tests), "-q", "-p", "no:cacheprovider",
                 f"--junitxml={junit_xml}"],
                check=False,
            )  # fmt: skip
        results: dict[str, dict[str, bool]] = defaultdict(dict)
        for case in ET.parse(junit_xml).iter("testcase"):
            match = re.fullmatch(r"(\w+)\[(.+)\]", case.get("name", ""))
            if match:
                failed = any(child.tag in ("failure", "error", "skipped") for child in case)
                results[match[1]][match[2]] = not failed
        return results


def write_verified(path: Path, keys: list[str], transformers_version: str) -> None:
    """Write a package's ``verified.json``: its verified model types, shipped in the wheel."""
    data = {
        "generated_by": "scripts/support_table.py",
        "transformers": transformers_version,
        "verified": sorted(keys),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
