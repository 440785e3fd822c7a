"""Low-memory builds of a 12B-class diffusion transformer: peak RSS of ``mobius build`` on FLUX.1-dev's shapes.

Writes a ``FluxTransformer2DModel`` component with FLUX.1-dev's config (19 double- and
38 single-stream blocks, 24 heads of 128, guidance embedding: 11.9B parameters; random
bf16 weights, about 23.8 GB in sharded safetensors with an index, as the hub's
``transformer/`` folder holds them) into ``--workdir``, one slab at a time. The names
and shapes come from diffusers' own class, built on torch's meta device (no memory).
The checkpoint is cached there (a ``.complete`` marker is written last).

It then runs ``mobius build`` on it in a child process (the checkpoint's bf16 kept, and
``--no-weights`` for the cost of imports and graphs alone) and prints wall seconds,
peak RSS, the largest tensor and whether the build stayed under largest tensor + 1 GB,
as ``lowmem_7b.py`` does for a Llama. GB here are 10^9 bytes.

Rerun (needs ~24 GB free for the checkpoint plus ~24 GB for the output, which is
deleted after it is measured unless ``--keep-outputs``)::

    df -h /tmp
    uv run python benchmarks/lowmem_flux.py                  # cached in /tmp/mobius-lowmem
    uv run python benchmarks/lowmem_flux.py --builds bf16    # the weighted build only
    rm -rf /tmp/mobius-lowmem/flux-dev                       # drop the cached checkpoint
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from lowmem_7b import GB, print_table, run_build, write_sharded

#: FLUX.1-dev's transformer/config.json.
FLUX_DEV = {
    "_class_name": "FluxTransformer2DModel",
    "attention_head_dim": 128,
    "axes_dims_rope": [16, 56, 56],
    "guidance_embeds": True,
    "in_channels": 64,
    "joint_attention_dim": 4096,
    "num_attention_heads": 24,
    "num_layers": 19,
    "num_single_layers": 38,
    "patch_size": 1,
    "pooled_projection_dim": 768,
}
BUILDS = {"no weights": ["--no-weights"], "bf16": []}
STEM = "diffusion_pytorch_model"


def flux_shapes() -> dict[str, tuple[int, ...]]:
    """Checkpoint names and shapes of FLUX.1-dev's transformer, from diffusers on the meta device.

    Asked of a child process: a child's ``ru_maxrss`` counts the memory of the process it
    was forked from, so this one must not hold torch when it starts the builds.
    """
    code = (
        "import json, sys, diffusers, torch\n"
        "config = {k: v for k, v in json.loads(sys.argv[1]).items() if k[0] != '_'}\n"
        "with torch.device('meta'):\n"
        "    model = diffusers.FluxTransformer2DModel.from_config(config)\n"
        "print(json.dumps({n: list(p.shape) for n, p in model.state_dict().items()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(FLUX_DEV)],
        capture_output=True,
        text=True,
        check=True,
    )
    return {name: tuple(shape) for name, shape in json.loads(done.stdout).items()}


def write_checkpoint(directory: Path) -> Path:
    """Write (or reuse) the random bf16 FLUX.1-dev transformer in ``directory``."""
    return write_sharded(directory, flux_shapes(), STEM, FLUX_DEV)


def main() -> None:
    """Make the checkpoint, run the builds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mobius-lowmem"))
    parser.add_argument("--builds", nargs="+", choices=list(BUILDS), default=list(BUILDS))
    parser.add_argument("--keep-outputs", action="store_true", help="keep the built models")
    args = parser.parse_args()

    model_dir = write_checkpoint(args.workdir / "flux-dev")
    shapes = flux_shapes()
    params = sum(int(np.prod(s)) for s in shapes.values())
    largest = max(2 * int(np.prod(s)) for s in shapes.values()) / GB
    rows = []
    for build in args.builds:
        output = args.workdir / f"out-flux-{build.replace(' ', '-')}"
        shutil.rmtree(output, ignore_errors=True)
        print(f"building {build} ...", flush=True)
        result = run_build(model_dir, output, BUILDS[build])
        if not args.keep_outputs:
            shutil.rmtree(output, ignore_errors=True)
        rows.append((build, result))

    print(
        f"\nmobius build, FLUX.1-dev transformer shapes ({params / 1e9:.1f}B parameters), random "
        f"bf16 checkpoint of {2 * params / GB:.2f} GB"
    )
    print_table(rows, largest)


if __name__ == "__main__":
    main()
