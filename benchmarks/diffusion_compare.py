"""One denoising step, side by side: mobius vs optimum-onnx's export, an SD UNet and a Flux DiT.

Two denoisers, random seeded weights with real architectures' widths (no hub download):

- ``unet``: a BK-SDM-Tiny-shaped ``UNet2DConditionModel`` (SD 1.x's UNet, 320/640/1280
  channels, CLIP-L's 768-wide text, one resnet per down stage, no mid block, the innermost
  stage removed: 0.32B parameters), 256x256 pixels = 32x32 latents, batch 2 (the
  classifier-free-guidance pair: one timestep, 77 text tokens each).
- ``flux``: ``FluxTransformer2DModel`` with FLUX.1-schnell's widths (24 heads of 128, T5's
  4096-wide text, CLIP's 768-wide pooled vector, no guidance embedding) but 1 double- and
  2 single-stream blocks (0.68B parameters), 256x256 pixels = 16x16 packed latent tokens,
  64 text tokens, batch 1 (schnell runs no CFG).

Each is saved with diffusers' ``save_pretrained`` under ``$MOBIUS_BENCH_DIR/checkpoints``
and built twice: ``mobius build --ep cpu --dtype f32`` and optimum-onnx's exporter for that
single component (its ``UNetOnnxConfig`` / ``FluxTransformerOnnxConfig`` through
``optimum.exporters.onnx.export``, as ``optimum-cli export onnx`` calls it for each
component of a whole pipeline: the CLI needs the whole pipeline, text encoders and VAE
included). Both graphs run in the same onnxruntime, CPU EP, 2 intra-op threads, the
same session options, on the same inputs, each in its own child process: one warm-up
step then ``--repeats`` timed steps (their median). The two paths run in rounds
(``--rounds``), forward then reverse order; the ratio mobius / optimum step time is the
median of the per-round ratios, printed with their range (target <= 1.0).

    uv run python benchmarks/diffusion_compare.py [--models unet flux] [--rounds 5]

On a busy machine ``--same-process N`` also times both graphs in one process, N steps each,
alternating (both graphs' weights held at once: about 2.6 GB for the UNet, 5.4 GB for Flux).

    uv run python benchmarks/diffusion_compare.py --profile   # ORT time per op type, once each
    uv run python benchmarks/diffusion_compare.py --rounds 1 --same-process 6   # busy machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

THREADS = 2

#: BK-SDM-Tiny's U-Net shape: SD 1.x's config with its innermost down/up stages and the
#: mid block removed and one resnet per down stage (two per up stage).
UNET_TINY = {
    "_class_name": "UNet2DConditionModel",
    "act_fn": "silu",
    "attention_head_dim": 8,
    "block_out_channels": [320, 640, 1280],
    "center_input_sample": False,
    "cross_attention_dim": 768,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "downsample_padding": 1,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 1,
    "mid_block_type": None,
    "norm_eps": 1e-05,
    "norm_num_groups": 32,
    "out_channels": 4,
    "sample_size": 64,
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}

#: FLUX.1-schnell's transformer config, 1 double- and 2 single-stream blocks of its 19 and 38.
FLUX_SMALL = {
    "_class_name": "FluxTransformer2DModel",
    "attention_head_dim": 128,
    "axes_dims_rope": [16, 56, 56],
    "guidance_embeds": False,
    "in_channels": 64,
    "joint_attention_dim": 4096,
    "num_attention_heads": 24,
    "num_layers": 1,
    "num_single_layers": 2,
    "patch_size": 1,
    "pooled_projection_dim": 768,
}

MODELS = {
    "unet": ("UNet2DConditionModel", UNET_TINY),
    "flux": ("FluxTransformer2DModel", FLUX_SMALL),
}
#: optimum's export config per component (its task manager's names for them).
OPTIMUM_TYPES = {"unet": "unet-2d-condition", "flux": "flux-transformer-2d"}
TOOLS = ("mobius", "optimum")


def step_inputs(model: str) -> dict[str, np.ndarray]:
    """The step's inputs, seeded; each graph takes the ones it declares (timestep reshaped)."""
    rng = np.random.default_rng(0)
    if model == "unet":  # batch 2: the CFG pair (unconditional, conditional), one timestep
        return {
            "sample": rng.standard_normal((2, 4, 32, 32)).astype(np.float32),
            "timestep": np.float32(801.0),
            "encoder_hidden_states": rng.standard_normal((2, 77, 768)).astype(np.float32),
        }
    rows, cols = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    return {
        "hidden_states": rng.standard_normal((1, 256, 64)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((1, 64, 4096)).astype(np.float32),
        "pooled_projections": rng.standard_normal((1, 768)).astype(np.float32),
        "timestep": np.float32(0.8),  # the pipeline's t / 1000
        "img_ids": np.stack([np.zeros(256), rows.ravel(), cols.ravel()], 1).astype(np.float32),
        "txt_ids": np.zeros((64, 3), np.float32),  # Flux pipelines pass zeros
    }


# --- children ---------------------------------------------------------------------


def graph_feed(session, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs the graph declares, in its dtypes; a timestep as a scalar or one per batch row."""
    dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(float16)": np.float16}
    batch = next(v.shape[0] for k, v in inputs.items() if k in ("sample", "hidden_states"))
    feed = {}
    for i in session.get_inputs():
        value = inputs[i.name]
        if i.name == "timestep" and len(i.shape) == 1:
            value = np.full((batch,), value)
        feed[i.name] = np.asarray(value).astype(dtypes[i.type])
    return feed


def child_step(model_path: str, inputs_path: str, output_path: str, repeats: int) -> dict:
    """Load the graph, one warm-up step, ``repeats`` timed steps; save the output once."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    start = time.perf_counter()
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - start
    feed = graph_feed(session, dict(np.load(inputs_path)))
    output = session.run(None, feed)[0]
    if output_path != "-":
        np.save(output_path, output)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return {"step_s": float(np.median(times)), "load_s": load}


def child_pair(mobius_path: str, optimum_path: str, inputs_path: str, steps: int) -> dict:
    """Both graphs in one process, steps alternating (A B, then B A, ...) after a warm-up each.

    For a busy machine: a process that lands in a slow minute slows both paths alike.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    inputs = dict(np.load(inputs_path))
    sessions, feeds, times = {}, {}, {}
    for tool, path in zip(TOOLS, (mobius_path, optimum_path), strict=True):
        sessions[tool] = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds[tool] = graph_feed(sessions[tool], inputs)
        sessions[tool].run(None, feeds[tool])  # warm-up
        times[tool] = []
    for index in range(steps):
        for tool in TOOLS if index % 2 == 0 else TOOLS[::-1]:
            start = time.perf_counter()
            sessions[tool].run(None, feeds[tool])
            times[tool].append(time.perf_counter() - start)
    return times


def child_profile(model_path: str, inputs_path: str) -> dict:
    """Milliseconds per op type in the second of two steps (ORT's profiler), and node counts."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(inputs_path).with_suffix("")) + "-profile"
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    feed = graph_feed(session, dict(np.load(inputs_path)))
    for _ in range(2):  # a warm-up, then the step that counts
        session.run(None, feed)
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    last = max((e for e in events if e["name"] == "model_run"), key=lambda e: e["ts"])
    per_op: dict[str, float] = {}
    nodes: dict[str, int] = {}
    for event in events:
        inside = last["ts"] <= event["ts"] <= last["ts"] + last["dur"]
        if inside and event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event["args"]["op_name"]
            per_op[op] = per_op.get(op, 0.0) + event["dur"] / 1e3
            nodes[op] = nodes.get(op, 0) + 1
    return {"ms": per_op, "nodes": nodes, "step_ms": last["dur"] / 1e3}


def export_optimum(model: str, checkpoint: str, out: str) -> None:
    """optimum-onnx's export of one diffusers component (run in the optimum-diffusers env).

    The same steps as ``optimum.exporters.utils.get_diffusion_models_for_export`` takes for
    a pipeline's ``unet`` / ``transformer``: the extra config fields it sets, the export
    config from its task manager, then ``export`` (opset and constant folding: its defaults).
    """
    import diffusers
    import torch
    from optimum.exporters.onnx import export
    from optimum.exporters.tasks import TasksManager

    component = getattr(diffusers, MODELS[model][0]).from_pretrained(
        checkpoint, torch_dtype=torch.float32
    )
    component.eval()
    component.config.requires_aesthetics_score = False
    component.config.time_cond_proj_dim = component.config.get("time_cond_proj_dim")
    component.config.text_encoder_projection_dim = 768  # CLIP-L's, as a pipeline would give
    component.config.export_model_type = OPTIMUM_TYPES[model]
    constructor = TasksManager.get_exporter_config_constructor(
        model=component, exporter="onnx", library_name="diffusers", task="semantic-segmentation"
    )
    config = constructor(component.config, int_dtype="int64", float_dtype="fp32")
    Path(out).mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        export(component, config, Path(out) / "model.onnx")


# --- parent -----------------------------------------------------------------------


def make_checkpoint(model: str) -> Path:
    """``$MOBIUS_BENCH_DIR/checkpoints/<model>``: the component with seeded random weights.

    diffusers' init (seed 0), then every parameter perturbed (``mobius.testing``'s
    ``perturb_parameters``, as the parity tests do) so that no weight is a plain 0 or 1.
    Made in a child process so that this one never holds torch or the model.
    """
    import _peers

    directory = _peers.WORKDIR / "checkpoints" / f"diffusion-{model}"
    if (directory / "config.json").exists():
        return directory
    tmp = directory.with_name(directory.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    class_name, config = MODELS[model]
    code = (
        "import json, sys, torch, diffusers\n"
        "from mobius.testing import perturb_parameters\n"
        "config = {k: v for k, v in json.loads(sys.argv[2]).items() if k[0] != '_'}\n"
        "torch.manual_seed(0)\n"
        "model = getattr(diffusers, sys.argv[1]).from_config(config)\n"
        "perturb_parameters(model, 0, 0.05)\n"
        "model.save_pretrained(sys.argv[3], safe_serialization=True)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, class_name, json.dumps(config), str(tmp)], check=True
    )
    tmp.rename(directory)
    return directory


def build(tool: str, model: str, checkpoint: Path) -> tuple[Path, str | None, list[str]]:
    """Build (or reuse) ``tool``'s graph; (folder, error or None, command)."""
    import _peers

    out = _peers.WORKDIR / "builds" / f"diffusion-{model}" / tool
    if tool == "mobius":
        command = [*_peers.mobius_command(), "build", "--model", str(checkpoint), str(out),
                   "--quiet", "--ep", "cpu", "--dtype", "f32"]  # fmt: skip
    else:
        try:
            python = _peers.peer_python("optimum-diffusers")
        except _peers.PeerUnavailable as error:
            return out, str(error), []
        command = [str(python), __file__, "--export-optimum", model, str(checkpoint), str(out)]
    if (out / "model.onnx").exists():
        return out, None, command
    shutil.rmtree(out, ignore_errors=True)
    log = out.with_name(out.name + ".log")
    seconds, rss, code = _peers.run_measured(command, log, timeout=1800)
    if code or not (out / "model.onnx").exists():
        return out, f"exit {code}: {_peers.short_error(log.read_text(errors='replace'))}", command
    print(f"built {model} with {tool}: {seconds:.1f} s, peak RSS {rss:.2f} GB (log: {log})")
    return out, None, command


def run_child(args: list[str]) -> dict:
    """One child of this script in its own process (this venv's onnxruntime)."""
    import _peers

    return _peers.run_child(sys.executable, __file__, args)


def op_counts(path: Path) -> dict[str, int]:
    """Nodes per op type of the graph as saved (before ORT's own fusions)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    counts: dict[str, int] = {}
    for node in graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def show_profiles(model: str, graphs: dict[str, Path], inputs_path: Path) -> None:
    """Time per op type, mobius beside optimum, one profiled step each after a warm-up."""
    profiles = {t: run_child(["profile", str(p), str(inputs_path)]) for t, p in graphs.items()}
    for tool, profile in profiles.items():
        if "error" in profile:
            print(f"{tool} profile failed: {profile['error']}")
            return
    ops = sorted(
        {op for p in profiles.values() for op in p["ms"]},
        key=lambda op: -max(p["ms"].get(op, 0.0) for p in profiles.values()),
    )
    print(f"\n{model}: ORT kernel ms per op type (one step; nodes after ORT's fusions)")
    print("| op type | " + " | ".join(f"{t} ms | {t} nodes" for t in profiles) + " |")
    print("|---|" + "---|---|" * len(profiles))
    for op in ops:
        cells = []
        for p in profiles.values():
            cells += [f"{p['ms'].get(op, 0.0):.1f}", str(p["nodes"].get(op, 0))]
        print(f"| {op} | " + " | ".join(cells) + " |")
    totals = [f"{sum(p['ms'].values()):.1f} | " for p in profiles.values()]
    print("| total | " + " | ".join(totals) + " |")
    steps = ", ".join(f"{t} {p['step_ms']:.0f} ms" for t, p in profiles.items())
    print(f"profiled step (ORT's model_run): {steps}")


def main() -> None:
    """Make the checkpoints and builds, time the steps in rounds, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument(
        "--rounds", type=int, default=5, help="runs of each path, interleaved (default 5)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per run (median)")
    parser.add_argument("--profile", action="store_true", help="also print ORT time per op type")
    parser.add_argument(
        "--same-process",
        type=int,
        default=0,
        metavar="N",
        help="also time N alternating steps of both graphs in one process (for a busy machine; "
        "holds both graphs' weights at once)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--export-optimum", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "step":
            print(json.dumps(child_step(rest[0], rest[1], rest[2], int(rest[3]))))
        elif kind == "pair":
            print(json.dumps(child_pair(rest[0], rest[1], rest[2], int(rest[3]))))
        else:
            print(json.dumps(child_profile(*rest)))
        return
    if args.export_optimum:
        export_optimum(*args.export_optimum)
        return

    sys.path.insert(0, str(Path(__file__).parent))
    import _peers

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"# diffusion_compare, {now}, one denoiser step, {THREADS} threads, {os.cpu_count()} CPUs"
    )
    print(f"load average before: {os.getloadavg()[0]:.2f} (other jobs skew the figures)")
    print(f"command: uv run python benchmarks/diffusion_compare.py {' '.join(sys.argv[1:])}")
    for model in args.models:
        checkpoint = make_checkpoint(model)
        scratch = _peers.WORKDIR / "builds" / f"diffusion-{model}"
        scratch.mkdir(parents=True, exist_ok=True)
        inputs_path = scratch / "inputs.npz"
        np.savez(inputs_path, **step_inputs(model))
        graphs, errors = {}, {}
        print(f"\n## {model}: {MODELS[model][0]} from {checkpoint}")
        for tool in TOOLS:
            out, error, command = build(tool, model, checkpoint)
            print(f"{tool}: {' '.join(command)}")
            if error:
                errors[tool] = error
            else:
                graphs[tool] = out / "model.onnx"

        # (this model's graphs and folders bound as defaults: the loop moves on)
        def run_one(tool, round_index, graphs=graphs, scratch=scratch, inputs_path=inputs_path):
            output = scratch / f"{tool}-output.npy" if round_index == 0 else "-"
            child = ["step", str(graphs[tool]), str(inputs_path), str(output), str(args.repeats)]
            return run_child(child)

        per_round = _peers.paired_rounds(graphs, args.rounds, run_one, label=f"{model} ")
        print("| path | step s (median) | rounds | session load s |")
        print("|---|---|---|---|")
        steps = {}
        for tool in TOOLS:
            measured = per_round.get(tool, [])
            failed = [m["error"] for m in measured if "error" in m] + [errors.get(tool)]
            if any(failed):
                print(f"| {tool} | failed: {next(f for f in failed if f)} | | |")
                continue
            steps[tool] = [m["step_s"] for m in measured]
            loads = float(np.median([m["load_s"] for m in measured]))
            rounds = " ".join(f"{s:.3f}" for s in steps[tool])
            print(f"| {tool} | {np.median(steps[tool]):.3f} | {rounds} | {loads:.1f} |")
        if len(steps) == 2:
            paired = [m / o for m, o in zip(steps["mobius"], steps["optimum"], strict=True)]
            mid = float(np.median(paired))
            print(
                f"mobius / optimum step time: {mid:.2f}x [{min(paired):.2f}-{max(paired):.2f}] "
                f"(target <= 1.0x: {mid <= 1.0})"
            )
            ours, theirs = (np.load(scratch / f"{t}-output.npy") for t in TOOLS)
            print(
                f"max abs diff mobius vs optimum output: {np.abs(ours - theirs).max():.2e} "
                f"(output max abs {np.abs(theirs).max():.2f}, shape {list(theirs.shape)})"
            )
        if args.same_process and len(graphs) == 2:
            pair = run_child(["pair", *(str(graphs[t]) for t in TOOLS), str(inputs_path),
                              str(args.same_process)])  # fmt: skip
            if "error" in pair:
                print(f"same process: failed: {pair['error']}")
            else:
                paired = [m / o for m, o in zip(pair["mobius"], pair["optimum"], strict=True)]
                medians = ", ".join(f"{t} {np.median(pair[t]):.3f} s" for t in TOOLS)
                print(
                    f"same process, {args.same_process} alternating steps each: {medians}; "
                    f"mobius / optimum {np.median(paired):.2f}x "
                    f"[{min(paired):.2f}-{max(paired):.2f}]"
                )
        for tool, path in graphs.items():
            counts = sorted(op_counts(path).items(), key=lambda kv: -kv[1])
            print(f"{tool} graph: {sum(c for _, c in counts)} nodes: "
                  + ", ".join(f"{op} {n}" for op, n in counts[:12]))  # fmt: skip
        if args.profile and len(graphs) == 2:
            show_profiles(model, graphs, inputs_path)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
