"""How long the ``mobius`` command takes to start: ``--help``, ``--version``, ``list``, ``build --help``.

Each command runs ``--rounds`` times in a fresh process (median wall time and
CPU time of the child, from ``os.wait4``), beside the same for the peer a user
compares with, ``optimum-cli --help``, from the optimum environment of
``_peers.py`` (installed on first use; ``--no-peer`` skips it). The last column
counts the heavy modules the command imported (onnx_ir, onnx, onnxscript,
sympy, numpy, transformers, torch), read from ``python -X importtime``.

    uv run python benchmarks/cli_start.py            # 7 rounds
    uv run python benchmarks/cli_start.py --rounds 15 --no-peer
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("onnx_ir", "onnx", "onnxscript", "sympy", "numpy", "transformers", "torch")
COMMANDS = {
    "mobius --help": ["--help"],
    "mobius --version": ["--version"],
    "mobius list": ["list"],
    "mobius build --help": ["build", "--help"],
}


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run, output discarded."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def heavy_imports(args: list[str]) -> list[str]:
    """The heavy top-level modules ``python -X importtime -m mobius ARGS`` imports."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mobius", *args],
        capture_output=True,
        text=True,
    )
    names = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    return [name for name in HEAVY if name in names]


def mobius_executable() -> list[str]:
    script = Path(sys.executable).parent / "mobius"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "mobius"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-peer", action="store_true", help="skip optimum-cli")
    args = parser.parse_args()

    rows = []
    for label, argv in COMMANDS.items():
        runs = [timed([*mobius_executable(), *argv]) for _ in range(args.rounds)]
        heavy = heavy_imports(argv)
        rows.append((label, runs, ", ".join(heavy) or "none"))
    if not args.no_peer:
        sys.path.insert(0, str(Path(__file__).parent))
        from _peers import peer_python

        optimum = peer_python("optimum").parent / "optimum-cli"
        runs = [timed([str(optimum), "--help"]) for _ in range(args.rounds)]
        rows.append(("optimum-cli --help (peer)", runs, "-"))

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; rounds: {args.rounds}")
    print(f"{'command':<28} {'wall s (median)':>16} {'cpu s (median)':>15}  heavy imports")
    for label, runs, heavy in rows:
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{label:<28} {wall:>16.3f} {cpu:>15.3f}  {heavy}")


if __name__ == "__main__":
    main()
