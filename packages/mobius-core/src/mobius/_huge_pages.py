"""Back a package's weights with transparent huge pages when ``mobius generate`` runs it.

ONNX Runtime keeps every weight, and every pre-packed copy of one, in its own ``malloc``
block. Where the kernel's transparent huge pages are ``madvise`` (most distributions'
default), those blocks sit on 4 KiB pages, and a decode step that streams all the weights
misses the TLB every 4 KiB: from 2 MiB pages SmolLM2 decodes 4-12% faster and Whisper-base
14% on the benchmark host (benchmarks/README.md). glibc 2.35+ advises huge pages for
its own memory under the tunable ``glibc.malloc.hugetlb=1``, but reads tunables only when
a process starts, so ``mobius generate`` re-executes itself once, with it set, before it
loads a package. Only ``generate``: it streams the weights once a token, many times over,
while the one-pass commands (``embed``, ``classify``, ``detect``...) read them once and
would only pay for the larger pages' first touch. ``MOBIUS_HUGE_PAGES=0`` turns this off;
a ``glibc.malloc.hugetlb`` the user set is kept as it is.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence

TUNABLE = "glibc.malloc.hugetlb"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
_OFF = {"0", "off", "no", "false"}


def thp_mode(path: str = THP_ENABLED) -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise`` or ``never``), or
    None where it cannot be read (not Linux, no THP support)."""
    try:
        with open(path) as file:
            text = file.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def glibc_version() -> tuple[int, int] | None:
    """The C library's version if it is glibc, else None (musl, macOS, Windows)."""
    library, version = platform.libc_ver()
    parts = version.split(".")
    if library != "glibc" or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def decodes(argv: Sequence[str]) -> bool:
    """Whether ``mobius ARGV`` is ``mobius generate`` running a package (not its help)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return command == "generate" and not any(a in ("-h", "--help") for a in argv)


def huge_page_environment(
    environ: Mapping[str, str],
    *,
    mode: str | None,
    glibc: tuple[int, int] | None,
) -> dict[str, str] | None:
    """``environ`` with glibc's huge-page tunable added, or None where it would change
    nothing: turned off, set already, not glibc 2.35+, or a THP mode other than ``madvise``
    (under ``always`` every large block is huge already; under ``never`` none can be)."""
    if environ.get("MOBIUS_HUGE_PAGES", "").strip().lower() in _OFF:
        return None
    if glibc is None or glibc < (2, 35) or mode != "madvise":
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if TUNABLE in tunables:  # the user's own choice, or this process re-executed already
        return None
    updated = dict(environ)
    updated["GLIBC_TUNABLES"] = f"{tunables}:{TUNABLE}=1" if tunables else f"{TUNABLE}=1"
    return updated


def reexec_with_huge_pages(argv: Sequence[str]) -> None:
    """Re-execute this process with glibc's huge-page tunable when ``mobius ARGV`` is
    ``mobius generate`` and the tunable would change something; returns only where it
    does not."""
    if sys.platform != "linux" or not decodes(argv):
        return
    environment = huge_page_environment(os.environ, mode=thp_mode(), glibc=glibc_version())
    original = getattr(sys, "orig_argv", None)
    if environment is None or not sys.executable or not original:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, original, environment)
    except OSError:  # the interpreter cannot be run again (removed, no permission): go on
        return
