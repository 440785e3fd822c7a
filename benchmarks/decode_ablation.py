"""Where a decode step's time goes beyond its matmuls: the step with parts of the graph cut out.

From a mobius causal-LM package (SmolLM2 fp32 by default; int4 packages too) this makes copies of the graph,
each sharing the package's weight file, with one kind of node replaced by the cheapest
node of the same output shape:

- ``no attention``: each GroupQueryAttention becomes a Slice of its packed QKV input (the
  query's width); the cache is neither read nor written;
- ``no norms``: each SkipSimplifiedLayerNormalization becomes its residual Add, each
  RMSNormalization an Identity;
- ``no MLP activation``: each packed gate/up Split, its SiLU and the product with the up
  projection become a Slice of the packed output (the gate's width);
- ``projections only``: all three at once: what is left is the embedding lookup, the
  projections and the head.

Each graph runs in its own child process (one ONNX Runtime session per process: two
sessions' spinning workers slow each other), 2 threads, under the environment
``mobius generate`` sets (glibc's huge-page tunable where it applies). A child times one
decode step at a fixed cache length (``--past``, default 96: the mean over
``decode_compare.py``'s 32-token prompt and 128 new tokens), the cache bound in place as
mobius's runner binds it, and measures the read floor in the same process: the graph's
weight bytes over numpy's read bandwidth (``decode_compare.read_bandwidth``). Variants run
in paired rounds (forward, then reverse order); medians over rounds are printed, with
each variant's saving against the full graph.

The cut graphs compute nothing meaningful: they are for timing only.

    uv run python benchmarks/decode_ablation.py [--package DIR] [--past 96] [--rounds 4]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import _peers  # noqa: E402
import decode_compare  # noqa: E402

THREADS = 2
VARIANTS = {  # label: (attention, norms, MLP activation) cut
    "full": (False, False, False),
    "no attention": (True, False, False),
    "no norms": (False, True, False),
    "no MLP activation": (False, False, True),
    "projections only": (True, True, True),
}


# --- the cut graphs -------------------------------------------------------------


def _int64(name: str, value: int):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array([value], dtype=np.int64), name)


def _constant_values(graph) -> dict[str, np.ndarray]:
    """The values of the graph's Constant nodes and initializers small enough to read inline."""
    from onnx import TensorProto, numpy_helper

    values = {}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    for tensor in graph.initializer:
        external = tensor.data_location == TensorProto.EXTERNAL
        if not external and int(np.prod(tensor.dims, dtype=np.int64)) <= 16:
            values[tensor.name] = numpy_helper.to_array(tensor)
    return values


def _drop_dead_nodes(graph) -> None:
    """Remove nodes none of whose outputs is read (by a node or as a graph output)."""
    while True:
        read = {name for node in graph.node for name in node.input}
        read |= {output.name for output in graph.output}
        keep = [node for node in graph.node if any(o and o in read for o in node.output)]
        if len(keep) == len(graph.node):
            return
        del graph.node[:]
        graph.node.extend(keep)


def cut_graph(model, *, attention: bool, norms: bool, activation: bool, query_width: int):
    """``model`` (an ``onnx.ModelProto`` of a mobius decoder) with the named parts replaced.

    Raises ValueError when a part asked for is not in the graph in the form mobius builds.
    """
    from onnx import helper

    graph = model.graph
    constants = _constant_values(graph)
    graph.initializer.extend(
        [_int64("ablate.zero", 0), _int64("ablate.last", -1), _int64("ablate.query", query_width)]
    )
    found = {"attention": 0, "norms": 0, "activation": 0}
    nodes, cache_outputs, down_inputs = [], set(), {}
    for node in graph.node:
        if attention and node.op_type == "GroupQueryAttention":
            found["attention"] += 1
            slice_inputs = [node.input[0], "ablate.zero", "ablate.query", "ablate.last"]
            nodes.append(helper.make_node("Slice", slice_inputs, [node.output[0]]))
            cache_outputs.update(o for o in node.output[1:] if o)
        elif norms and node.op_type == "SkipSimplifiedLayerNormalization":
            found["norms"] += 1
            total = (
                node.output[3] if len(node.output) > 3 and node.output[3] else node.name + ".sum"
            )
            nodes.append(helper.make_node("Add", list(node.input[:2]), [total]))
            nodes.append(helper.make_node("Identity", [total], [node.output[0]]))
        elif norms and node.op_type in ("RMSNormalization", "SimplifiedLayerNormalization"):
            found["norms"] += 1
            nodes.append(helper.make_node("Identity", [node.input[0]], [node.output[0]]))
        elif activation and node.op_type == "Split" and "/mlp/" in node.name:
            found["activation"] += 1
            sizes = constants.get(node.input[1]) if len(node.input) > 1 else None
            if sizes is None or len(sizes) != 2:
                raise ValueError(f"{node.name}: not a two-way packed gate/up Split")
            gate = node.name + ".gate"
            down_inputs[node.name.split("/mlp/")[0]] = gate
            graph.initializer.append(_int64(gate + ".end", int(sizes[0])))
            slice_inputs = [node.input[0], "ablate.zero", gate + ".end", "ablate.last"]
            nodes.append(helper.make_node("Slice", slice_inputs, [gate]))
        elif activation and node.op_type.startswith("MatMul") and "/mlp/down_proj/" in node.name:
            layer = node.name.split("/mlp/")[0]
            if layer not in down_inputs:
                raise ValueError(f"{node.name}: no packed gate/up Split before it in {layer}")
            rewired = type(node)()
            rewired.CopyFrom(node)  # MatMul or MatMulNBits: its weights and attributes kept
            rewired.input[0] = down_inputs[layer]
            nodes.append(rewired)
        else:
            nodes.append(node)
    for part, asked in (("attention", attention), ("norms", norms), ("activation", activation)):
        if asked and not found[part]:
            raise ValueError(f"the graph has no {part} nodes in the form mobius builds")
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [output for output in graph.output if output.name not in cache_outputs]
    del graph.output[:]
    graph.output.extend(kept)
    _drop_dead_nodes(graph)
    return model


def make_variants(package: Path, scratch: Path) -> dict[str, Path]:
    """One directory per variant under ``scratch``: its graph, and the package's weight file
    (a hard link where the filesystem allows it, else a copy: ONNX Runtime refuses external
    data outside the graph's own directory, symbolic links included)."""
    import onnx

    config = json.loads((package / "config.json").read_text())
    try:
        heads = int(config["num_attention_heads"])
        head_size = int(config.get("head_dim") or config["hidden_size"] // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        raise ValueError("config.json gives no attention heads and head size") from None
    data_files = [p for p in package.iterdir() if p.name.endswith(".data")]
    directories = {}
    for label, (attention, norms, activation) in VARIANTS.items():
        model = onnx.load(str(package / "model.onnx"), load_external_data=False)
        cut = cut_graph(
            model,
            attention=attention,
            norms=norms,
            activation=activation,
            query_width=heads * head_size,
        )
        directory = scratch / label.replace(" ", "-")
        directory.mkdir()
        onnx.save(cut, str(directory / "model.onnx"))
        for data in data_files:
            try:
                os.link(data, directory / data.name)
            except OSError:
                shutil.copyfile(data, directory / data.name)
        directories[label] = directory
    return directories


# --- child: one graph, one process ----------------------------------------------


def child(model_dir: str, past: int, steps: int, weight_bytes: int) -> dict:
    """Median and mean ms of one decode step at cache length ``past``, and the floor's ms."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # the cut graphs leave unused initializers
    session = ort.InferenceSession(
        str(Path(model_dir) / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    binding = session.io_binding()
    inputs = {value.name: value for value in session.get_inputs()}
    outputs = {value.name for value in session.get_outputs()}
    buffers = []  # the binding does not keep them alive
    for name, value in inputs.items():
        if name.startswith("past_key_values."):
            _, heads, _, head_size = value.shape
            buffer = ort.OrtValue.ortvalue_from_numpy(
                np.zeros((1, heads, past + steps + 16, head_size), np.float32)
            )
            buffers.append(buffer)
            binding.bind_ortvalue_input(name, buffer)
            present = name.replace("past_key_values.", "present.", 1)
            if present in outputs:
                binding.bind_ortvalue_output(present, buffer)
    binding.bind_cpu_input("input_ids", np.array([[1000]], np.int64))
    if "attention_mask" in inputs:
        binding.bind_cpu_input("attention_mask", np.ones((1, past + 1), np.int64))
    if "position_ids" in inputs:
        binding.bind_cpu_input("position_ids", np.array([[past]], np.int64))
    binding.bind_output("logits")
    for _ in range(10):
        session.run_with_iobinding(binding)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        session.run_with_iobinding(binding)
        int(binding.get_outputs()[0].numpy()[0, -1].argmax())  # as the runner takes a token
        times.append(time.perf_counter() - start)
    bandwidth = decode_compare.read_bandwidth(THREADS)
    return {
        "median_ms": float(np.median(times)) * 1e3,
        "mean_ms": float(np.mean(times)) * 1e3,
        "floor_ms": weight_bytes / bandwidth * 1e3,
    }


# --- parent ---------------------------------------------------------------------


def default_package() -> Path:
    """SmolLM2 fp32 built by mobius (``decode_compare.py``'s build, made here if missing)."""
    built = _peers.build("mobius", "fp32", "smollm2", reuse=True)
    if built.error:
        raise SystemExit(f"could not build SmolLM2 fp32: {built.error}")
    return built.out


def main() -> None:
    """Cut the graph, time every variant in paired rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, help="a mobius causal-LM package (fp32)")
    parser.add_argument("--past", type=int, default=96, help="cache length of the timed step")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per child")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model_dir, past, steps, weight_bytes = args.child
        print(json.dumps(child(model_dir, int(past), int(steps), int(weight_bytes))))
        return
    if args.past < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--past, --steps and --rounds must be at least 1")
    package = (args.package or default_package()).resolve()
    if not (package / "model.onnx").is_file() or not (package / "config.json").is_file():
        parser.error(f"{package} is not a mobius causal-LM package (model.onnx, config.json)")
    weight_bytes = decode_compare.weight_bytes_per_token(package)
    environment = _peers.mobius_command_environment()
    with tempfile.TemporaryDirectory(dir=package.parent, prefix=".ablate-") as scratch:
        try:
            directories = make_variants(package, Path(scratch))
        except ValueError as error:
            raise SystemExit(f"{package}: {error}") from None

        def run_one(label: str, _round: int) -> dict:
            command = [str(directories[label]), args.past, args.steps, weight_bytes]
            return _peers.run_child(sys.executable, __file__, command, env=environment)

        results = _peers.paired_rounds(list(VARIANTS), args.rounds, run_one)
    errors = {label: r[0]["error"] for label, r in results.items() if "error" in r[0]}
    for label, error in errors.items():
        print(f"{label}: {error}", file=sys.stderr)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# decode_ablation, {now}, {package}")
    print(
        f"# cache length {args.past}, {args.steps} steps per child, {args.rounds} rounds, "
        f"{THREADS} threads, {os.cpu_count()} CPUs, environment {environment or 'unchanged'}"
    )
    print(f"# weights read per step: {weight_bytes / 1e9:.3f} GB")
    print("| variant | median ms | mean ms | share of the floor | saving vs full |")
    print("|---|---|---|---|---|")
    full = None
    for label, rounds in results.items():
        if label in errors:
            continue
        median = float(np.median([r["median_ms"] for r in rounds]))
        mean = float(np.median([r["mean_ms"] for r in rounds]))
        shares = [r["floor_ms"] / r["median_ms"] for r in rounds]
        full = median if label == "full" else full
        saving = f"{full - median:+.2f} ms" if full is not None and label != "full" else ""
        share = f"{np.median(shares):.0%} [{min(shares):.0%}-{max(shares):.0%}]"
        print(f"| {label} | {median:.2f} | {mean:.2f} | {share} | {saving} |")


if __name__ == "__main__":
    main()
