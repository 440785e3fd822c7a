"""Low-memory builds: peak RSS of ``mobius build`` on a 7B-class Llama, against its largest tensor.

Writes a Llama-2-7B-shaped checkpoint (hidden 4096, 32 layers, 32 heads,
intermediate 11008, vocab 32000; random bf16 weights, about 13.5 GB in sharded
safetensors with an index) into ``--workdir``, streaming one slab at a time so the
generator itself stays small. The checkpoint is cached there (a ``.complete`` marker
is written last) and reused by later runs.

It then runs ``mobius build --quant int4`` and ``mobius build --dtype f16`` on it,
each in its own process, plus ``--no-weights`` for the cost of imports and graphs
alone, and prints one table: wall seconds, peak RSS (the child's ``ru_maxrss``),
the largest tensor, the limit (largest tensor + 1 GB) and whether the build stayed
under it. The peak file-backed RSS (mmap pages of the checkpoint) is sampled from
``/proc`` and printed too, to show where memory goes. GB here are 10^9 bytes.

Rerun (needs ~14 GB free for the checkpoint plus ~14 GB for the f16 output, which is
deleted after it is measured, as is every output unless ``--keep-outputs``)::

    df -h /tmp
    uv run python benchmarks/lowmem_7b.py                      # 7B, cached in /tmp/mobius-lowmem
    uv run python benchmarks/lowmem_7b.py --preset 1b          # TinyLlama-1.1B shapes, ~2.2 GB
    uv run python benchmarks/lowmem_7b.py --workdir DIR --builds f16 --keep-outputs
    rm -rf /tmp/mobius-lowmem                                  # drop the cached checkpoint
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np

GB = 1e9
PRESETS = {
    # Llama-2-7B
    "7b": dict(hidden=4096, layers=32, heads=32, kv_heads=32, intermediate=11008, vocab=32000),
    # TinyLlama-1.1B: a quicker run of the same measurement
    "1b": dict(hidden=2048, layers=22, heads=32, kv_heads=4, intermediate=5632, vocab=32000),
}
BUILDS = {
    "no weights": ["--no-weights"],
    "int4": ["--quant", "int4"],
    "f16": ["--dtype", "f16"],
}
SHARD_BYTES = 2 * 10**9
SLAB_BYTES = 64 << 20  # the generator makes at most this much random data at a time


def llama_shapes(p: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The HF checkpoint names and shapes of a Llama with the preset's sizes."""
    h, i, kv = p["hidden"], p["intermediate"], p["hidden"] // p["heads"] * p["kv_heads"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (p["vocab"], h)}
    for n in range(p["layers"]):
        pre = f"model.layers.{n}."
        shapes |= {
            pre + "input_layernorm.weight": (h,),
            pre + "self_attn.q_proj.weight": (h, h),
            pre + "self_attn.k_proj.weight": (kv, h),
            pre + "self_attn.v_proj.weight": (kv, h),
            pre + "self_attn.o_proj.weight": (h, h),
            pre + "post_attention_layernorm.weight": (h,),
            pre + "mlp.gate_proj.weight": (i, h),
            pre + "mlp.up_proj.weight": (i, h),
            pre + "mlp.down_proj.weight": (h, i),
        }
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (p["vocab"], h)
    return shapes


def _write_tensor(f, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> None:
    """Append one bf16 tensor's data to ``f``, a slab of rows at a time (norm weights: ones)."""
    if name.endswith("norm.weight"):
        np.ones(shape, ml_dtypes.bfloat16).tofile(f)
        return
    cols = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    step = max(1, SLAB_BYTES // (4 * cols))
    for start in range(0, rows, step):
        slab = rng.standard_normal((min(step, rows - start), cols), dtype=np.float32)
        slab *= 0.02
        slab.astype(ml_dtypes.bfloat16).tofile(f)


def write_sharded(directory: Path, shapes: dict, stem: str, config: dict) -> Path:
    """Write (or reuse) random bf16 ``shapes`` as ``{stem}-0000N-of-0000M.safetensors`` shards
    with ``{stem}.safetensors.index.json`` and ``config.json`` in ``directory``."""
    if (directory / ".complete").is_file():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(np.prod(shape))
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes

    rng = np.random.default_rng(0)
    weight_map = {}
    for n, names in enumerate(shards, 1):
        file_name = f"{stem}-{n:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {}, 0
        for name in names:
            nbytes = 2 * int(np.prod(shapes[name]))
            header[name] = {
                "dtype": "BF16",
                "shape": list(shapes[name]),
                "data_offsets": [offset, offset + nbytes],
            }
            offset += nbytes
            weight_map[name] = file_name
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned
        print(f"writing {file_name} ({offset / GB:.2f} GB)", flush=True)
        with open(directory / file_name, "wb") as f:
            f.write(len(blob).to_bytes(8, "little") + blob)
            for name in names:
                _write_tensor(f, name, shapes[name], rng)
    total = sum(2 * int(np.prod(s)) for s in shapes.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / f"{stem}.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / ".complete").write_text("")
    return directory


def write_checkpoint(directory: Path, preset: str) -> Path:
    """Write (or reuse) the random bf16 checkpoint of ``preset`` in ``directory``."""
    p = PRESETS[preset]
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": p["vocab"],
        "hidden_size": p["hidden"],
        "intermediate_size": p["intermediate"],
        "num_hidden_layers": p["layers"],
        "num_attention_heads": p["heads"],
        "num_key_value_heads": p["kv_heads"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    return write_sharded(directory, llama_shapes(p), "model", config)


def _sample_file_rss(pid: int, peak: dict[str, int], done: threading.Event) -> None:
    """Track the child's largest RssFile and RssAnon (kB) until ``done`` is set."""
    while not done.is_set():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in ("RssFile", "RssAnon"):
                peak[key] = max(peak.get(key, 0), int(value.split()[0]))
        done.wait(0.1)


def run_build(model_dir: Path, output: Path, args: list[str]) -> dict[str, float]:
    """Run one ``mobius build`` in a child process; its wall time and peak RSS in GB."""
    command = [sys.executable, "-m", "mobius", "build", "--model", str(model_dir), str(output)]
    start = time.perf_counter()
    child = subprocess.Popen([*command, "--quiet", *args])
    peak: dict[str, int] = {}
    done = threading.Event()
    sampler = threading.Thread(target=_sample_file_rss, args=(child.pid, peak, done))
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"build {' '.join(args)} failed with exit code {child.returncode}")
    out_bytes = sum(f.stat().st_size for f in output.rglob("*") if f.is_file())
    return {
        "wall": wall,
        "peak": usage.ru_maxrss * 1024 / GB,
        "anon": peak.get("RssAnon", 0) * 1024 / GB,
        "file": peak.get("RssFile", 0) * 1024 / GB,
        "out": out_bytes / GB,
    }


def main() -> None:
    """Make the checkpoint, run the builds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-lowmem"))
    parser.add_argument("--preset", choices=sorted(PRESETS), default="7b")
    parser.add_argument("--builds", nargs="+", choices=list(BUILDS), default=list(BUILDS))
    parser.add_argument("--keep-outputs", action="store_true", help="keep the built models")
    args = parser.parse_args()

    model_dir = write_checkpoint(args.workdir / f"llama-{args.preset}", args.preset)
    shapes = llama_shapes(PRESETS[args.preset])
    largest = max(2 * int(np.prod(s)) for s in shapes.values()) / GB
    total = sum(2 * int(np.prod(s)) for s in shapes.values()) / GB

    rows = []
    for build in args.builds:
        output = args.workdir / f"out-{args.preset}-{build.replace(' ', '-')}"
        shutil.rmtree(output, ignore_errors=True)
        print(f"building {build} ...", flush=True)
        result = run_build(model_dir, output, BUILDS[build])
        if not args.keep_outputs:
            shutil.rmtree(output, ignore_errors=True)
        rows.append((build, result))

    print(f"\nmobius build, {args.preset} Llama, random bf16 checkpoint of {total:.2f} GB")
    print_table(rows, largest)


def print_table(rows: list[tuple[str, dict]], largest: float) -> None:
    """One line per build: wall, peak RSS, anon/mmap peaks, output size, against largest + 1 GB."""
    limit = largest + 1.0
    head = (
        f"{'build':<11} {'wall s':>7} {'peak RSS GB':>11} {'anon GB':>8} {'mmap GB':>8} "
        f"{'out GB':>7} {'largest GB':>10} {'limit GB':>8}  result"
    )
    print(head)
    print("-" * len(head))
    for build, r in rows:
        verdict = "pass" if r["peak"] <= limit else "FAIL"
        print(
            f"{build:<11} {r['wall']:>7.1f} {r['peak']:>11.2f} {r['anon']:>8.2f} {r['file']:>8.2f} "
            f"{r['out']:>7.2f} {largest:>10.3f} {limit:>8.2f}  {verdict}"
        )
    print("(anon/mmap: peak RssAnon/RssFile sampled every 0.1 s; limit = largest tensor + 1 GB)")


if __name__ == "__main__":
    main()
