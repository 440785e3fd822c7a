"""Decode speed, side by side: mobius vs onnxruntime-genai's builder vs other exporters vs PyTorch.

A 32-token prompt, 128 new tokens, greedy, 2 threads. Each path runs in its own
child process: one warm-up generation, then three timed ones (medians shown).
Prefill ms is the first forward (the prompt, giving the first token); tokens/s
counts the 127 one-token steps after it. All paths run in rounds (``--rounds``,
default 5), forward then reverse order, so drift of the shared machine over
minutes falls on both sides of a ratio: a ratio is the median of its per-round
ratios, printed with their range.

Paths: mobius fp32 and int4, the genai builder's fp32 and int4 (in
onnxruntime-genai's own generator "og" and in a plain ONNX Runtime KV-cache loop),
mobius's own runner (``mobius generate``'s, its cache updated in place), optimum-onnx
fp32 and torch.onnx (dynamo) fp32 (plain loop), and PyTorch eager fp32, the reference
for the greedy-token match lengths. For SmolLM2 also two GGUF files, each built by
mobius with its blocks kept (the default) and run by llama.cpp (``llama-cpp-python``,
in its own environment built without AMX): the Q4_1 file the checkpoint comes from,
and (``--tools ... q4_k_m``) a Q4_K_M that llama.cpp's quantizer makes from it. The
floor is the weight bytes read per token over the read bandwidth of numpy sum/max over
a 1 GiB array, on 2 threads. ``--prompt-tokens`` sets the prompt length (the prompt
text repeated).

    uv run python benchmarks/decode_compare.py [--checkpoint smollm2|llama1b] [--tools ...]

Builds are reused from ``build_compare.py`` when present, otherwise made here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

PROMPT = (
    "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre and "
    "its cafes. Every year many visitors come to the city to see its museums, to walk "
    "along the river and to enjoy the food."
)
PROMPT_TOKENS = 32
NEW_TOKENS = 128
THREADS = 2
WARMUP_TOKENS = 8
REPEATS = 3  # timed generations per path; the median counts


def timed(generate) -> dict:
    """Warm up, then REPEATS timed generations; the median prefill and tokens/s."""
    generate(WARMUP_TOKENS)
    runs = [generate(NEW_TOKENS) for _ in range(REPEATS)]
    return {
        "prefill_ms": float(np.median([r[1] for r in runs])),
        "tok_s": float(np.median([r[2] for r in runs])),
        "tokens": runs[0][0],
    }


# (label, tool, precision, runner); runner "ort" is the plain loop, "genai" the
# onnxruntime-genai generator, "mobius" mobius's own runner (the cache updated in place
# where the build allows it), "llama_cpp" llama.cpp, "eager" PyTorch.
PATHS = [
    ("eager fp32", None, "fp32", "eager"),
    ("mobius fp32 (og)", "mobius", "fp32", "genai"),
    ("mobius fp32 (loop)", "mobius", "fp32", "ort"),
    ("mobius fp32 (runner)", "mobius", "fp32", "mobius"),
    ("genai fp32 (og)", "genai", "fp32", "genai"),
    ("genai fp32 (loop)", "genai", "fp32", "ort"),
    ("optimum fp32 (loop)", "optimum", "fp32", "ort"),
    ("dynamo fp32 (loop)", "dynamo", "fp32", "ort"),
    ("mobius int4 (og)", "mobius", "int4", "genai"),
    ("mobius int4 (loop)", "mobius", "int4", "ort"),
    ("mobius int4 (runner)", "mobius", "int4", "mobius"),
    ("mobius int4-b64 (og)", "mobius", "int4-b64", "genai"),
    ("mobius int4-b64 (runner)", "mobius", "int4-b64", "mobius"),
    ("genai int4 (og)", "genai", "int4", "genai"),
    ("genai int4 (loop)", "genai", "int4", "ort"),
    ("mobius gguf (og)", "mobius-gguf", "gguf", "genai"),
    ("mobius gguf (loop)", "mobius-gguf", "gguf", "ort"),
    ("mobius gguf (runner)", "mobius-gguf", "gguf", "mobius"),
    ("llama.cpp gguf", "llama.cpp", "gguf", "llama_cpp"),
    ("mobius q4_k_m (og)", "mobius-gguf-q4_k_m", "gguf", "genai"),
    ("mobius q4_k_m (loop)", "mobius-gguf-q4_k_m", "gguf", "ort"),
    ("mobius q4_k_m (runner)", "mobius-gguf-q4_k_m", "gguf", "mobius"),
    ("llama.cpp q4_k_m", "llama.cpp-q4_k_m", "gguf", "llama_cpp"),
]


# --- children: each prints one JSON line {"prefill_ms", "tok_s", "tokens"} ---------


def head_size(model_dir: Path) -> int:
    """Head size from the build's config files, for graphs that leave the KV cache's last axis symbolic."""
    genai = model_dir / "genai_config.json"
    if genai.exists():
        return json.loads(genai.read_text())["model"]["decoder"]["head_size"]
    config = json.loads((model_dir / "config.json").read_text())
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def ort_generate(
    session, model_dir: Path, ids: list[int], new_tokens: int
) -> tuple[list[int], float, float]:
    """Greedy decode with a plain ORT KV-cache loop, feeding whichever inputs the graph has."""
    inputs = {i.name: i for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    kv_dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
    past = {}
    for name, i in inputs.items():
        if name.startswith("past_key_values"):
            last = i.shape[3] if isinstance(i.shape[3], int) else head_size(model_dir)
            past[name] = np.zeros((1, i.shape[1], 0, last), kv_dtype[i.type])
    tokens = np.array([ids], dtype=np.int64)
    mask = np.ones_like(tokens)
    positions = np.arange(tokens.shape[1], dtype=np.int64)[None]
    out, start = [], time.perf_counter()
    for step in range(new_tokens):
        if step == 1:
            prefill = time.perf_counter() - start
            start = time.perf_counter()
        feed = {"input_ids": tokens, "attention_mask": mask, "position_ids": positions, **past}
        result = dict(
            zip(
                names,
                session.run(None, {k: v for k, v in feed.items() if k in inputs}),
                strict=True,
            )
        )
        token = int(result["logits"][0, -1].argmax())
        out.append(token)
        past = {
            n.replace("present", "past_key_values", 1): v
            for n, v in result.items()
            if n.startswith("present")
        }
        tokens = np.array([[token]], dtype=np.int64)
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((1, 1), np.int64)], axis=1)
    return out, prefill * 1e3, (new_tokens - 1) / (time.perf_counter() - start)


def child_ort(model_dir: str, ids: list[int]) -> dict:
    """Plain ORT loop on ``model_dir/model.onnx``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(Path(model_dir) / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return timed(lambda n: ort_generate(session, Path(model_dir), ids, n))


def child_genai(model_dir: str, ids: list[int]) -> dict:
    """onnxruntime-genai's own generator (greedy; min_length keeps it from stopping at EOS)."""
    import onnxruntime_genai as og

    config = og.Config(model_dir)
    options = {"intra_op_num_threads": THREADS, "inter_op_num_threads": 1}
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    model = og.Model(config)

    def generate(new_tokens: int) -> tuple[list[int], float, float]:
        params = og.GeneratorParams(model)
        total = len(ids) + new_tokens
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(np.array([ids], dtype=np.int32))  # runs the prompt
        generator.generate_next_token()  # picks the first token from the prompt's logits
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        while not generator.is_done():
            generator.generate_next_token()
        seconds = time.perf_counter() - start
        sequence = [int(t) for t in generator.get_sequence(0)][len(ids) :]
        return sequence, prefill * 1e3, (len(sequence) - 1) / seconds

    return timed(generate)


def child_mobius(model_dir: str, ids: list[int]) -> dict:
    """mobius's own runner (``mobius generate``'s ``TextGenerator``), greedy, no EOS stop."""
    from mobius.generate import open_generator

    generator = open_generator(model_dir, threads=THREADS)

    def generate(new_tokens: int) -> tuple[list[int], float, float]:
        out, start = [], time.perf_counter()
        stream = generator.generate_ids(
            ids, max_new_tokens=new_tokens, eos_token_ids=[], do_sample=False
        )
        for token in stream:
            out.append(token)
            if len(out) == 1:
                prefill = time.perf_counter() - start
                start = time.perf_counter()
        return out, prefill * 1e3, (new_tokens - 1) / (time.perf_counter() - start)

    return timed(generate)


def child_eager(checkpoint_dir: str, ids: list[int]) -> dict:
    """PyTorch eager fp32 with the transformers KV cache."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(THREADS)
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint_dir, dtype=torch.float32, trust_remote_code=False
    ).eval()

    @torch.inference_mode()
    def generate(new_tokens: int) -> tuple[list[int], float, float]:
        tokens, past, out = torch.tensor([ids]), None, []
        start = time.perf_counter()
        for step in range(new_tokens):
            if step == 1:
                prefill = time.perf_counter() - start
                start = time.perf_counter()
            result = model(input_ids=tokens, past_key_values=past, use_cache=True)
            past, token = result.past_key_values, int(result.logits[0, -1].argmax())
            out.append(token)
            tokens = torch.tensor([[token]])
        return out, prefill * 1e3, (new_tokens - 1) / (time.perf_counter() - start)

    return timed(generate)


def child_llama_cpp(gguf_path: str, ids: list[int]) -> dict:
    """llama.cpp on the GGUF file itself (``llama-cpp-python``), greedy from the same ids.

    It runs in the ``llama.cpp`` peer environment: llama-cpp-python built for this
    host's instruction sets but without llama.cpp's AMX kernels, which die with SIGSEGV
    in the first decode on this VM (its CPU lists AMX; see ``_peers.PEER_BUILD_ENV``).
    """
    from llama_cpp import Llama

    llm = Llama(
        model_path=gguf_path,
        n_ctx=len(ids) + NEW_TOKENS + 8,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        verbose=False,
    )
    vocab = llm.n_vocab()

    def last_logits() -> np.ndarray:
        # Llama.eval keeps no logits unless logits_all; the context holds the last row.
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,))

    def generate(new_tokens: int) -> tuple[list[int], float, float]:
        llm.reset()
        out, start = [], time.perf_counter()
        llm.eval(ids)
        for step in range(new_tokens):
            if step == 1:
                prefill = time.perf_counter() - start
                start = time.perf_counter()
            token = int(np.argmax(last_logits()))
            out.append(token)
            if step + 1 < new_tokens:
                llm.eval([token])
        return out, prefill * 1e3, (new_tokens - 1) / (time.perf_counter() - start)

    return timed(generate)


CHILDREN = {
    "ort": child_ort,
    "genai": child_genai,
    "eager": child_eager,
    "llama_cpp": child_llama_cpp,
    "mobius": child_mobius,
}


def runner_of(label: str) -> str:
    """The child runner of a path label in PATHS."""
    return next(runner for name, _, _, runner in PATHS if name == label)


# --- parent ---------------------------------------------------------------------


def weight_bytes_per_token(model_dir: Path) -> int:
    """Bytes of initializers one decode step reads: all of them except tables read only by Gather."""
    import onnx

    model = onnx.load(str(model_dir / "model.onnx"), load_external_data=False)
    users: dict[str, set[str]] = {}
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            users.setdefault(name, set()).add(node.op_type if position == 0 else "other")
    total = 0
    for tensor in model.graph.initializer:
        if users.get(tensor.name) == {"Gather"}:
            continue  # an embedding lookup reads one row per token
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        total += int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
    return total


def gguf_bytes_per_token(path: Path) -> int:
    """Bytes of a GGUF file's tensors one decode step reads: all of them, but one row of
    ``token_embd`` when the file has its own ``output`` head (else it is the tied head)."""
    from mobius.weights import GGUFFile

    with GGUFFile.open(path) as gguf:
        tensors = gguf.tensors
        total = sum(tensor.nbytes for tensor in tensors.values())
        if "output.weight" in tensors:
            total -= tensors["token_embd.weight"].nbytes
    return total


def read_bandwidth(threads: int) -> float:
    """Bytes per second that ``threads`` threads read from a 1 GiB float32 array (best of 5).

    Each thread reduces its own slice (numpy releases the GIL inside reductions);
    the faster of sum and max counts, as either alone can be compute-bound.
    """
    from concurrent.futures import ThreadPoolExecutor

    array = np.ones(1 << 28, np.float32)
    slices = np.array_split(array, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for reduce in (np.sum, np.max) * 5:
            start = time.perf_counter()
            list(pool.map(reduce, slices))
            best = min(best, time.perf_counter() - start)
    return array.nbytes / best


def main() -> None:
    """Build what is missing, run every path, print the table, ratios and floor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", choices=("smollm2", "llama1b"), default="smollm2")
    tools = ("mobius", "genai", "optimum", "dynamo", "mobius-gguf", "llama.cpp", "q4_k_m")
    parser.add_argument(
        "--tools", nargs="+", choices=tools, default=list(tools), help="eager always runs"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="run every path this many times, interleaved (default 5); medians are shown",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=PROMPT_TOKENS,
        help=f"prompt length (default {PROMPT_TOKENS}); longer prompts repeat the text",
    )
    parser.add_argument(
        "--huge-pages-everywhere",
        action="store_true",
        help="give every path the huge-page tunable that the mobius command sets for its "
        "runner (rows marked 'runner'), for a comparison on equal memory",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("RUNNER", "PATH", "IDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        runner, target, ids = args.child
        print(json.dumps(CHILDREN[runner](target, json.loads(ids))))
        return

    import _peers
    from transformers import AutoTokenizer

    source = _peers.checkpoint(args.checkpoint)
    ids = AutoTokenizer.from_pretrained(source, trust_remote_code=False)(PROMPT)["input_ids"][
        :PROMPT_TOKENS
    ]
    assert len(ids) == PROMPT_TOKENS, len(ids)
    ids = (ids * -(-args.prompt_tokens // PROMPT_TOKENS))[
        : args.prompt_tokens
    ]  # the text, repeated
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"# decode_compare, {now}, {args.checkpoint}, {len(ids)}-token prompt, {NEW_TOKENS} new tokens,"
    )
    print(
        f"# greedy, {THREADS} threads, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(f"mobius flags: fp32 {_peers.mobius_flags('fp32')}, int4 {_peers.mobius_flags('int4')}")
    command_env = _peers.mobius_command_environment()
    everywhere = " (every path: --huge-pages-everywhere)" if args.huge_pages_everywhere else ""
    print(f"mobius command environment, in the runner rows{everywhere}: {command_env or 'none'}")

    builds, runs, results = {}, {}, {}
    # The GGUF files (SmolLM2 only): the Q4_1 file the checkpoint comes from, and a
    # Q4_K_M made from it; "q4_k_m" in --tools adds the second file's paths for both tools.
    gguf_tools = ("mobius-gguf", "llama.cpp")
    picked = [
        path
        for path in PATHS
        if path[1] is None
        or path[1] in args.tools
        or ("q4_k_m" in args.tools and path[1].removesuffix("-q4_k_m") in args.tools)
    ]
    paths = [
        path
        for path in picked
        if args.checkpoint == "smollm2"
        or path[1] is None
        or path[1].removesuffix("-q4_k_m") not in gguf_tools
    ]
    for label, tool, precision, runner in paths:
        if tool is None:
            runs[label] = (Path(sys.executable), source)
            continue
        if tool.startswith("llama.cpp"):
            try:
                quant = "q4_k_m" if tool.endswith("q4_k_m") else "q4_1"
                runs[label] = (_peers.peer_python("llama.cpp"), _peers.smollm2_gguf(quant))
            except _peers.PeerUnavailable as error:
                results[label] = {"error": str(error)}
            continue
        key = (tool, precision)
        if key not in builds:
            builds[key] = _peers.build(tool, precision, args.checkpoint, reuse=True)
        if builds[key].error:
            results[label] = {"error": "build " + builds[key].error}
            continue
        try:
            python = _peers.peer_python("genai") if runner == "genai" else Path(sys.executable)
        except _peers.PeerUnavailable as error:
            results[label] = {"error": str(error)}
            continue
        runs[label] = (python, builds[key].out)

    # Rounds: every path once per round, in forward then reverse order, so that the
    # machine's drift over minutes falls on both sides of each ratio alike.
    def run_one(label: str, _round: int) -> dict:
        python, target = runs[label]
        runner = runner_of(label)
        env = command_env if runner == "mobius" or args.huge_pages_everywhere else {}
        return _peers.run_child(python, __file__, [runner, target, json.dumps(ids)], env=env)

    per_round = _peers.paired_rounds(runs, args.rounds, run_one)
    for label, measured in per_round.items():
        failed = [m for m in measured if "error" in m]
        if failed:
            results[label] = failed[0]
            continue
        results[label] = {
            "prefill_ms": float(np.median([m["prefill_ms"] for m in measured])),
            "tok_s": float(np.median([m["tok_s"] for m in measured])),
            "rounds": [m["tok_s"] for m in measured],
            "prefill_rounds": [m["prefill_ms"] for m in measured],
            "tokens": measured[0]["tokens"],
        }
        if label.startswith("llama.cpp"):
            results[label]["weights"] = gguf_bytes_per_token(runs[label][1])
        elif label != "eager fp32":
            results[label]["weights"] = weight_bytes_per_token(runs[label][1])

    one_thread, bandwidth = read_bandwidth(1), read_bandwidth(THREADS)
    print(f"load average after: {os.getloadavg()[0]:.2f} (other jobs skew the figures)")
    reference = results["eager fp32"].get("tokens", [])
    own_fp32 = {
        "mobius int4 (og)": "mobius fp32 (og)",
        "mobius int4 (loop)": "mobius fp32 (loop)",
        "genai int4 (og)": "genai fp32 (og)",
        "genai int4 (loop)": "genai fp32 (loop)",
        "mobius int4-b64 (og)": "mobius fp32 (og)",
        "mobius int4-b64 (runner)": "mobius fp32 (og)",
        "mobius int4 (runner)": "mobius fp32 (og)",
    }
    header = (
        "path",
        "prefill ms",
        "tok/s",
        "match eager",
        "match fp32",
        "weights GB/tok",
        "floor tok/s",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for label, _, _, _ in paths:
        r = results[label]
        if "error" in r:
            print(f"| {label} | failed: {r['error']} |")
            continue
        fp32 = results.get(own_fp32.get(label, ""), {}).get("tokens")
        weights = r.get("weights") or results.get("mobius fp32 (loop)", {}).get("weights")
        cells = [
            label,
            f"{r['prefill_ms']:.1f}",
            f"{r['tok_s']:.1f}",
            f"{_peers.match_length(r['tokens'], reference)}/{NEW_TOKENS}" if reference else "-",
            f"{_peers.match_length(r['tokens'], fp32)}/{NEW_TOKENS}" if fp32 else "-",
            f"{weights / 1e9:.3f}" if weights else "-",
            f"{bandwidth / weights:.0f}" if weights else "-",
        ]
        print("| " + " | ".join(cells) + " |")
    print(
        f"read bandwidth (numpy sum/max over 1 GiB): {bandwidth / 1e9:.1f} GB/s on {THREADS} threads "
        f"(the floor's), {one_thread / 1e9:.1f} GB/s on one"
    )
    print("(eager's floor uses mobius fp32's weight bytes)")

    print(f"tok/s: median of {args.rounds} rounds; ratios: median of the per-round ratios [range]")

    def ratio(a: str, b: str, at_least: float = 1.0, prefill: bool = False) -> None:
        """a / b in decode tok/s, or with ``prefill`` b's prefill ms / a's (a speedup)."""
        if a not in results or b not in results:
            return  # a path left out with --tools
        key = "prefill_rounds" if prefill else "rounds"
        ra, rb = results[a].get(key), results[b].get(key)
        if not (ra and rb):
            print(f"{a} / {b}: n/a")
            return
        pairs = zip(ra, rb, strict=True)
        paired = [y / x for x, y in pairs] if prefill else [x / y for x, y in pairs]
        mid = float(np.median(paired))
        what = "prefill speed" if prefill else "decode tok/s"
        print(
            f"{a} / {b} ({what}): {mid:.2f}x [{min(paired):.2f}-{max(paired):.2f}] "
            f"(target >= {at_least:g}x: {mid >= at_least})"
        )

    for precision in ("fp32", "int4"):
        for runner in ("og", "loop"):  # like for like: the same runtime on both sides
            ratio(f"mobius {precision} ({runner})", f"genai {precision} ({runner})")
    # The GGUF file: its kept Q4_1/Q8_0 blocks against the genai builder's int4 (from
    # the same weights, dequantized) and against llama.cpp running the file itself.
    ratio("mobius gguf (og)", "genai int4 (og)")
    ratio("mobius gguf (loop)", "genai int4 (loop)")
    for quant, peer in (("gguf", "llama.cpp gguf"), ("q4_k_m", "llama.cpp q4_k_m")):
        for runner in ("og", "loop", "runner"):
            ratio(f"mobius {quant} ({runner})", peer)
            ratio(f"mobius {quant} ({runner})", peer, prefill=True)
    ratio("mobius fp32 (loop)", "optimum fp32 (loop)")
    ratio("mobius fp32 (loop)", "dynamo fp32 (loop)")
    ratio("mobius fp32 (loop)", "eager fp32", at_least=3.0)
    ratio("mobius int4 (runner)", "genai int4 (og)")
    ratio("mobius fp32 (runner)", "genai fp32 (og)")

    # Against the floor: the share of it each mobius path reaches, and llama.cpp's.
    targets = {"fp32": 0.85, "int4": 0.70, "int4-b64": 0.70, "gguf": 0.70}
    for label, _, precision, _ in paths:
        r = results[label]
        if "error" in r or not r.get("weights") or not label.startswith(("mobius", "llama")):
            continue
        share = r["tok_s"] / (bandwidth / r["weights"])
        target = targets[precision]
        print(f"{label}: {share:.0%} of the floor (target >= {target:.0%}: {share >= target})")


if __name__ == "__main__":
    main()
