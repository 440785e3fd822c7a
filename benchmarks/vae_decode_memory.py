"""Video VAE decode memory: peak RSS of Wan 2.1's VAE decoder, whole, frame by frame, tiled.

Makes Wan 2.1's ``AutoencoderKLWan`` (its hub config: base 96, z 16, 127M parameters)
with random weights, builds it with ``mobius build``, and decodes one latent video of
``--frames`` frames at ``--height`` x ``--width`` once per ``--modes`` entry, each in a
fresh child process that imports only numpy, ONNX Runtime and ``mobius_diffusion.tiling``:

- ``whole``: ``decoder/model``, every frame at once;
- ``tiled``: ``decoder/model`` in diffusers' tiles (256 pixels every 192);
- ``step``: ``decoder_step/model``, one latent frame at a time with the conv caches,
  as diffusers and the runners decode (:func:`mobius_diffusion.tiling.decode_stepwise`);
- ``step-tiled``: frame by frame within each tile (``--vae-tiling``, diffusers' tiled decode).

It prints wall seconds and the child's peak RSS (``ru_maxrss``) for each. The whole
graph's memory grows with frames times tile area; frame by frame it holds one latent
frame's activations and the caches, plus the decoded video. GB here are 10^9 bytes.

Rerun (the model is cached in ``--workdir``)::

    uv run python benchmarks/vae_decode_memory.py --height 480 --width 832 --frames 9
    uv run python benchmarks/vae_decode_memory.py --height 480 --width 832 --frames 81 \
        --modes step step-tiled
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

GB = 1e9
MODES = ("whole", "tiled", "step", "step-tiled")

#: Wan-AI/Wan2.1-T2V-1.3B-Diffusers' vae/config.json (its fields that differ from defaults).
WAN21_VAE = {"base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2}

MAKE = r"""
import sys, torch, diffusers, json
torch.manual_seed(0)
vae = diffusers.AutoencoderKLWan.from_config(json.loads(sys.argv[1]))
with torch.no_grad():
    for p in vae.parameters():
        p.normal_(0, 0.02)
vae.save_pretrained(sys.argv[2], safe_serialization=True)
"""

DECODE = r"""
import json, sys, time
import numpy as np
import onnxruntime as ort
from mobius_diffusion.tiling import decode_stepwise, decode_tiled, tile_plan
model, mode, frames, height, width = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
tiled = mode.endswith("tiled")
graph = "/decoder_step/model.onnx" if mode.startswith("step") else "/decoder/model.onnx"
options = ort.SessionOptions()
options.enable_cpu_mem_arena = not mode.startswith("step")  # as the runners open each graph
session = ort.InferenceSession(model + graph, options, providers=["CPUExecutionProvider"])
latent_frames = (frames - 1) // 4 + 1
latents = np.random.default_rng(0).standard_normal(
    (1, 16, latent_frames, height // 8, width // 8)).astype(np.float32)
decode = lambda z: session.run(["sample"], {"latent_sample": z})[0]
if mode.startswith("step"):
    names = [o.name for o in session.get_outputs()]
    past = {i.name: i.shape for i in session.get_inputs() if i.name != "latent_sample"}
    step = lambda feeds: dict(zip(names, session.run(names, feeds)))
    decode = lambda z: decode_stepwise(step, past, z)
start = time.perf_counter()
plan = tile_plan(json.load(open(model + "/config.json")))
video = decode_tiled(decode, latents, plan) if tiled and plan.applies(latents) else decode(latents)
print(json.dumps({"seconds": time.perf_counter() - start, "shape": list(video.shape)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-vae-memory"))
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=416)
    parser.add_argument("--frames", type=int, default=5, help="4k+1 video frames")
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=list(MODES), help="decodes to measure"
    )
    args = parser.parse_args()

    source, built = args.workdir / "hf", args.workdir / "onnx"
    if not (built / "decoder_step" / "model.onnx").is_file():
        subprocess.run([sys.executable, "-c", MAKE, json.dumps(WAN21_VAE), str(source)], check=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mobius",
                "build",
                "--model",
                str(source),
                str(built),
                "--quiet",
                "--overwrite",
            ],
            check=True,
        )
    rows = []
    for mode in args.modes:
        start = time.perf_counter()
        sizes = (str(args.frames), str(args.height), str(args.width))
        result, peak = run_peak(DECODE, str(built), mode, *sizes)
        rows.append((mode, time.perf_counter() - start, peak, result.get("shape")))
    print(
        f"\nWan 2.1 VAE decode, {args.frames} frames of {args.height} x {args.width} "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    print(f"{'decode':<10} {'wall s':>7} {'peak RSS GB':>11}  output")
    for mode, seconds, peak, shape in rows:
        print(f"{mode:<10} {seconds:>7.1f} {peak:>11.2f}  {shape}", flush=True)


def run_peak(code: str, *args: str) -> tuple[dict, float]:
    """Run ``code`` in a fresh Python and wait for it with ``wait4``: its JSON line and peak RSS."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"decode failed with exit code {os.waitstatus_to_exitcode(status)}")
    return json.loads(out.strip().splitlines()[-1]), usage.ru_maxrss * 1024 / GB


if __name__ == "__main__":
    main()
