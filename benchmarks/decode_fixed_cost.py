"""A decode step's cost apart from its weights: mobius vs llama.cpp on a narrow GGUF.

The narrow file keeps everything of SmolLM2's Q4_1 GGUF that sets how much work a token
is besides reading weights: its 30 layers, 9 query and 3 KV heads of 64, its vocabulary,
tokenizer and metadata, Q4_1 projections and a Q8_0 embedding. Only the widths shrink
(hidden 288 instead of 576, MLP 64 instead of 1536), so a token reads about a quarter of
SmolLM2's weight bytes, in under 1 ms. Its values are random (seeded).

Both tools run the narrow file and SmolLM2's own file, as ``decode_compare.py`` runs
them (its children: 32-token prompt, 128 greedy tokens, 2 threads; mobius's runner
under ``mobius generate``'s environment), in paired rounds. For each run the table gives
ms per token, the floor (weight bytes per token over numpy's read bandwidth), and the
time above it. The narrow file's time above its floor is what a token costs besides its
weights: graph launches or building, attention, norms, the head's argmax. SmolLM2's
time above the floor minus that is what the kernels cost beyond reading the weights.

    uv run python benchmarks/decode_fixed_cost.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import _peers  # noqa: E402
import decode_compare  # noqa: E402

NARROW_HIDDEN = 288  # 9 heads x 32: transformers checks hidden % heads; the heads stay 64 wide
NARROW_MLP = 64
SCRIPT = str(Path(decode_compare.__file__))


def make_narrow_gguf(source: Path, out: Path) -> None:
    """Write SmolLM2's GGUF with narrow widths and seeded random values to ``out``."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    arch = "llama"
    if reader.fields["general.architecture"].contents() != arch:
        raise SystemExit(f"{source} is not a llama GGUF file")
    layers = int(reader.fields[f"{arch}.block_count"].contents())
    heads = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv_heads = int(reader.fields[f"{arch}.attention.head_count_kv"].contents())
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    head_size = int(reader.fields[f"{arch}.embedding_length"].contents()) // heads  # kept
    replaced = {
        f"{arch}.embedding_length",
        f"{arch}.feed_forward_length",
        "general.architecture",
    }
    partial = out.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in replaced:
            continue
        value_type = field.types[0]
        if value_type == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), value_type, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), value_type)
    writer.add_embedding_length(NARROW_HIDDEN)
    writer.add_feed_forward_length(NARROW_MLP)
    writer.add_key_length(head_size)
    writer.add_value_length(head_size)
    rng = np.random.default_rng(0)

    def add(name: str, rows: int, columns: int, kind) -> None:
        values = (rng.standard_normal((rows, columns)) * 0.05).astype(np.float32)
        writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)

    q4_1, q8_0 = gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0
    add("token_embd.weight", vocab, NARROW_HIDDEN, q8_0)  # also the tied head, as in SmolLM2
    writer.add_tensor("output_norm.weight", np.ones(NARROW_HIDDEN, np.float32))
    query, key_value = heads * head_size, kv_heads * head_size
    for layer in range(layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(NARROW_HIDDEN, np.float32))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(NARROW_HIDDEN, np.float32))
        add(f"{block}.attn_q.weight", query, NARROW_HIDDEN, q4_1)
        add(f"{block}.attn_k.weight", key_value, NARROW_HIDDEN, q4_1)
        add(f"{block}.attn_v.weight", key_value, NARROW_HIDDEN, q4_1)
        add(f"{block}.attn_output.weight", NARROW_HIDDEN, query, q4_1)
        add(f"{block}.ffn_gate.weight", NARROW_MLP, NARROW_HIDDEN, q4_1)
        add(f"{block}.ffn_up.weight", NARROW_MLP, NARROW_HIDDEN, q4_1)
        add(f"{block}.ffn_down.weight", NARROW_HIDDEN, NARROW_MLP, q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(out)


def build_narrow(gguf_path: Path, out: Path) -> Path:
    """mobius's package of the narrow file, blocks kept (as ``decode_compare.py`` builds
    SmolLM2's)."""
    if (out / "model.onnx").is_file():
        return out
    log = out.with_name(out.name + ".log")
    _, _, code = _peers.run_measured(_peers.mobius_gguf_command(gguf_path, out), log)
    if code or not (out / "model.onnx").is_file():
        raise SystemExit(f"mobius could not build {gguf_path}: see {log}")
    return out


def main() -> None:
    """Make and build the narrow file, run both tools on both files, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    smollm2 = _peers.smollm2_gguf()
    narrow = _peers.WORKDIR / "checkpoints" / "smollm2-narrow.gguf"
    if not narrow.exists():
        narrow.parent.mkdir(parents=True, exist_ok=True)
        make_narrow_gguf(smollm2, narrow)
    built = _peers.build("mobius-gguf", "gguf", "smollm2", reuse=True)  # decode_compare's
    if built.error:
        raise SystemExit(f"mobius could not build {smollm2}: {built.error}")
    narrow_package = _peers.WORKDIR / "builds" / "smollm2" / "mobius-narrow-gguf"
    packages = {"narrow": build_narrow(narrow, narrow_package), "SmolLM2": built.out}
    files = {"narrow": narrow, "SmolLM2": smollm2}

    from transformers import AutoTokenizer

    source = _peers.checkpoint("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    ids = json.dumps(tokenizer(decode_compare.PROMPT)["input_ids"][: decode_compare.PROMPT_TOKENS])
    llama_python = _peers.peer_python("llama.cpp")
    environment = _peers.mobius_command_environment()
    paths = [(tool, name) for name in files for tool in ("mobius", "llama.cpp")]

    def run_one(path: tuple[str, str], _round: int) -> dict:
        tool, name = path
        if tool == "mobius":
            arguments = ["mobius", packages[name], ids]
            return _peers.run_child(sys.executable, SCRIPT, arguments, env=environment)
        return _peers.run_child(llama_python, SCRIPT, ["llama_cpp", files[name], ids])

    results = _peers.paired_rounds(paths, args.rounds, run_one)
    bandwidth = decode_compare.read_bandwidth(decode_compare.THREADS)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# decode_fixed_cost, {now}, {args.rounds} rounds, {decode_compare.THREADS} threads,")
    print(f"# {os.cpu_count()} CPUs, numpy's read floor {bandwidth / 1e9:.1f} GB/s, "
          f"mobius under {environment or 'an unchanged environment'}")  # fmt: skip
    print(
        "| file | tool | ms/token | weights GB/token | floor ms | above the floor, ms | tokens agree |"
    )
    print("|---|---|---|---|---|---|---|")
    for tool, name in paths:
        measured = results[(tool, name)]
        failed = [m for m in measured if "error" in m]
        if failed:
            print(f"| {name} | {tool} | {failed[0]['error']} | | | | |")
            continue
        ms = float(np.median([1e3 / m["tok_s"] for m in measured]))
        spread = [1e3 / m["tok_s"] for m in measured]
        if tool == "mobius":
            weights = decode_compare.weight_bytes_per_token(packages[name])
        else:
            weights = decode_compare.gguf_bytes_per_token(files[name])
        floor = weights / bandwidth * 1e3
        other = results[("llama.cpp" if tool == "mobius" else "mobius", name)][0]
        agree = _peers.match_length(measured[0]["tokens"], other.get("tokens", []))
        print(f"| {name} | {tool} | {ms:.2f} [{min(spread):.2f}-{max(spread):.2f}] | "
              f"{weights / 1e9:.3f} | {floor:.2f} | {ms - floor:.2f} | "
              f"{agree}/{len(measured[0]['tokens'])} |")  # fmt: skip


if __name__ == "__main__":
    main()
