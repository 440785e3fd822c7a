"""``mobius generate`` re-executes itself with glibc's huge-page tunable before it loads a
package (mobius._huge_pages), and no other command does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from mobius._huge_pages import (
    decodes,
    glibc_version,
    huge_page_environment,
    thp_mode,
)

GLIBC = (2, 36)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["generate", "out/", "Hello"], True),
        (["--verbose", "generate", "out/", "Hello"], True),
        (["embed", "out/", "text"], False),  # one pass over the weights
        (["speaker", "out/", "a.wav"], False),  # a domain package's one-pass command
        (["build", "--model", "m", "out/"], False),
        (["list"], False),
        (["info", "out/"], False),
        (["generate", "--help"], False),
        (["--version"], False),
        ([], False),
    ],
)
def test_only_generate_reexecutes(argv, expected):
    assert decodes(argv) is expected


def test_the_tunable_is_added_and_others_kept():
    env = huge_page_environment({"PATH": "/bin"}, mode="madvise", glibc=GLIBC)
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    env = huge_page_environment(
        {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, mode="madvise", glibc=GLIBC
    )
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"


@pytest.mark.parametrize(
    ("environ", "mode", "glibc"),
    [
        ({"MOBIUS_HUGE_PAGES": "0"}, "madvise", GLIBC),  # turned off
        ({"MOBIUS_HUGE_PAGES": " Off "}, "madvise", GLIBC),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise", GLIBC),  # the user's own
        ({}, "always", GLIBC),  # huge already
        ({}, "never", GLIBC),  # cannot be
        ({}, None, GLIBC),  # no THP
        ({}, "madvise", (2, 34)),  # no such tunable
        ({}, "madvise", None),  # not glibc
    ],
)
def test_no_reexec_where_it_changes_nothing(environ, mode, glibc):
    assert huge_page_environment(environ, mode=mode, glibc=glibc) is None


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    enabled = tmp_path / "enabled"
    enabled.write_text("always [madvise] never\n")
    assert thp_mode(str(enabled)) == "madvise"
    enabled.write_text("garbled\n")
    assert thp_mode(str(enabled)) is None
    assert thp_mode(str(tmp_path / "missing")) is None


SCRIPT = textwrap.dedent(
    """
    import os, sys
    from mobius._huge_pages import reexec_with_huge_pages
    reexec_with_huge_pages(sys.argv[1:])
    print(os.getpid(), os.environ.get("GLIBC_TUNABLES", "-"))
    """
)


def _run(tmp_path, *argv: str, **env: str) -> tuple[int, str, int]:
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    environ = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    process = subprocess.Popen(
        [sys.executable, str(script), *argv],
        stdout=subprocess.PIPE,
        text=True,
        env={**environ, **env},
    )
    out, _ = process.communicate(timeout=60)
    pid, tunables = out.split()
    return int(pid), tunables, process.pid


@pytest.mark.skipif(
    huge_page_environment({}, mode=thp_mode(), glibc=glibc_version()) is None
    or sys.platform != "linux",
    reason="this host has no transparent huge pages in madvise mode, or no glibc 2.35+",
)
def test_the_process_reexecutes_itself_once(tmp_path):
    pid, tunables, started = _run(tmp_path, "generate", "out/")
    assert (pid, tunables) == (started, "glibc.malloc.hugetlb=1")  # same process, new image
    _, tunables, _ = _run(tmp_path, "generate", "out/", MOBIUS_HUGE_PAGES="0")
    assert tunables == "-"
    _, tunables, _ = _run(tmp_path, "embed", "out/")
    assert tunables == "-"
