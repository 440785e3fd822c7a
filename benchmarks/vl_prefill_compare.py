"""Vision-language prefill, side by side: mobius vs onnxruntime-genai (Qwen2.5-VL, one image).

One 448x448 image plus a short prompt, up to the first generated token, 2 threads:
image preprocessing + vision encoder + embedding merge + the text prefill. The model
is Qwen2.5-VL-3B's widths (vision 1280 wide, 16 heads, window attention; text 2048
wide, 16/2 heads, vocabulary 151936) with few layers (8 vision blocks, two of them
full attention, and 4 text layers), random weights drawn with ``torch.manual_seed(0)``,
saved locally with a PIL image processor and a byte-level BPE tokenizer (every byte a
token, Qwen's special tokens at their real ids) that both tools' processors read.

Paths, each in its own child process, in paired rounds (forward then reverse order):

- ``mobius (runner)``: ``mobius build --ep cpu --dtype f32``, run by mobius-vision's
  ``VisionLanguageGenerator`` (its torch-free processor, then the vision, embedding and
  decoder graphs in ONNX Runtime);
- ``mobius (og)``: the same package in onnxruntime-genai (``og.MultiModalProcessor``,
  ``og.Images``, then the generator), from the genai_config.json mobius writes;
- ``genai (og)``: onnxruntime-genai 0.18's model builder builds Qwen2.5-VL's text decoder
  only (``exclude_embeds=true``: it takes ``inputs_embeds``); it has no vision encoder
  or embedding graph. The package run here is the builder's decoder with mobius's
  vision and embedding graphs and processor settings, so this row differs from
  ``mobius (og)`` in the decoder alone.

Parts: preprocessing (both processors), vision and embedding (mobius's graphs), and
the decoder prefill of both decoders in plain ONNX Runtime from the same
``inputs_embeds`` and M-RoPE positions. First tokens must agree.

    uv run python benchmarks/vl_prefill_compare.py [--rounds 5] [--repeats 2] [--rebuild]

Each process loads its package, runs one warm-up prefill, then ``--repeats`` timed
ones (their median); a round runs every path once; figures are medians over rounds
and a ratio is the median of its per-round ratios, with their range.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

THREADS = 2
WARMUP = 1
REPEATS = 2  # timed prefills per process (--repeats); their median counts
IMAGE_SIZE = 448  # pixels square: a 32x32 patch grid, 256 image tokens
PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
    "Describe this image in one sentence.<|im_end|>\n<|im_start|>assistant\n"
)
NAME = "qwen2_5_vl_3b_v8t4"  # checkpoint folder: 3B widths, 8 vision blocks, 4 text layers
SPECIAL = {  # Qwen2.5-VL's ids
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}
VISION = dict(
    depth=8,  # the real model has 32, full attention in blocks 7, 15, 23, 31
    hidden_size=1280,
    intermediate_size=3420,
    num_heads=16,
    out_hidden_size=2048,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=112,
    fullatt_block_indexes=[3, 7],
    hidden_act="silu",
    in_channels=3,
    tokens_per_second=2,
)
TEXT = dict(
    hidden_size=2048,
    intermediate_size=11008,
    num_hidden_layers=4,  # the real model has 36
    num_attention_heads=16,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=128000,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    tie_word_embeddings=True,
    bos_token_id=151643,
    eos_token_id=151645,
)


# --- the checkpoint ---------------------------------------------------------------


def checkpoint() -> Path:
    """The cached Qwen2.5-VL checkpoint (random weights, real 3B widths), made on first use."""
    import _peers

    directory = _peers.WORKDIR / "checkpoints" / NAME
    if not (directory / "config.json").exists():
        tmp = directory.with_name(NAME + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        _make_checkpoint(tmp)
        tmp.rename(directory)
    return directory


def _make_checkpoint(directory: Path) -> None:
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    torch.manual_seed(0)
    ids = {k.strip("<|>"): v for k, v in SPECIAL.items()}
    config = Qwen2_5_VLConfig(
        vision_config=VISION,
        text_config=TEXT,
        image_token_id=ids["image_pad"],
        video_token_id=ids["video_pad"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        tie_word_embeddings=True,
        bos_token_id=TEXT["bos_token_id"],
        eos_token_id=TEXT["eos_token_id"],
    )
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16).eval()
    model.save_pretrained(directory)  # bf16 on disk (1.6 GB); both tools build it in fp32
    # Qwen2.5-VL's defaults: patch 14, merge 2, min 56*56 and max 28*28*1280 pixels
    Qwen2VLImageProcessorPil(patch_size=14, temporal_patch_size=2, merge_size=2).save_pretrained(
        directory
    )
    _byte_tokenizer(directory)
    # transformers 5 writes rope_theta inside rope_parameters only; the genai builder
    # reads config.rope_theta too
    path = directory / "config.json"
    values = json.loads(path.read_text())
    values["text_config"]["rope_theta"] = TEXT["rope_parameters"]["rope_theta"]
    path.write_text(json.dumps(values, indent=2) + "\n")


def _byte_tokenizer(directory: Path) -> None:
    """A byte-level BPE tokenizer, every byte one token (ids 0-255), Qwen's special tokens
    at their ids; ``tokenizer_class`` Qwen2Tokenizer so onnxruntime-extensions reads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {piece: i for i, piece in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    vocab = dict(sorted(vocab.items()))
    vocab = {piece: i for i, piece in enumerate(vocab)}
    vocab.update(SPECIAL)
    backend = Tokenizer(models.BPE(vocab, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL)})
    tokenizer.save_pretrained(directory)
    path = directory / "tokenizer_config.json"
    values = json.loads(path.read_text())
    path.write_text(json.dumps(dict(values, tokenizer_class="Qwen2Tokenizer"), indent=2))


def image_path() -> Path:
    """A seeded 448x448 RGB image (smooth gradients plus noise), saved as PNG."""
    import _peers
    from PIL import Image

    path = _peers.WORKDIR / "checkpoints" / NAME / "image.png"
    if not path.exists():
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE] / IMAGE_SIZE
        base = np.stack([x, y, (x + y) / 2], axis=-1) * 200
        pixels = np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(path)
    return path


# --- builds ----------------------------------------------------------------------


def builds(source: Path, rebuild: bool = False) -> dict[str, Path | str]:
    """The packages per tool, built when missing (or ``rebuild``): mobius's, and the genai
    builder's decoder put together with mobius's vision and embedding graphs (a str: why
    it failed)."""
    import _peers

    root = _peers.WORKDIR / "builds" / NAME
    if rebuild:
        shutil.rmtree(root, ignore_errors=True)
    mobius, decoder, genai = root / "mobius-fp32", root / "genai-decoder-fp32", root / "genai-fp32"
    commands = {
        mobius: [
            *_peers.mobius_command(),
            "build",
            "--model",
            str(source),
            str(mobius),
            "--quiet",
            "--ep",
            "cpu",
            "--dtype",
            "f32",
        ],  # fmt: skip
    }
    out: dict[str, Path | str] = {"mobius": mobius, "genai": genai}
    try:
        python = _peers.peer_python("genai")
        commands[decoder] = [str(python), str(_peers.genai_builder(python)), "-i", str(source),
                             "-o", str(decoder), "-p", "fp32", "-e", "cpu", "-c",
                             str(_peers.WORKDIR / "genai-cache"),
                             "--extra_options", "exclude_embeds=true"]  # fmt: skip
    except _peers.PeerUnavailable as error:
        out["genai"] = str(error)
    for target, command in commands.items():
        print("$ " + " ".join(command), flush=True)
        if (target / "genai_config.json").exists():
            print("  (reused)")
            continue
        shutil.rmtree(target, ignore_errors=True)
        log = target.with_name(target.name + ".log")
        seconds, rss, code = _peers.run_measured(command, log)
        print(f"  {seconds:.1f} s, peak RSS {rss:.2f} GB, exit {code}")
        if code:
            failed = f"build exit {code}: {_peers.short_error(log.read_text(errors='replace'))}"
            out["mobius" if target == mobius else "genai"] = failed
    if isinstance(out["genai"], Path) and isinstance(out["mobius"], Path):
        _assemble_genai(mobius, decoder, genai)
    return out


def _assemble_genai(mobius: Path, decoder: Path, genai: Path) -> None:
    """The genai row's package: the builder's decoder (``decoder/``), mobius's ``vision/``
    and ``embedding/`` (links), mobius's genai_config.json with the builder's decoder
    section, and mobius's processor_config.json and tokenizer."""
    shutil.rmtree(genai, ignore_errors=True)
    genai.mkdir()
    (genai / "decoder").symlink_to(decoder)
    for part in ("vision", "embedding"):
        (genai / part).symlink_to(mobius / part)
    for name in ("processor_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(mobius / name, genai / name)
    config = json.loads((mobius / "genai_config.json").read_text())
    built = json.loads((decoder / "genai_config.json").read_text())["model"]["decoder"]
    config["model"]["decoder"] = dict(built, filename="decoder/model.onnx")
    (genai / "genai_config.json").write_text(json.dumps(config, indent=4) + "\n")


# --- children: each prints one JSON line ----------------------------------------------


def _timed(prefill) -> dict:
    """WARMUP untimed prefills, then REPEATS timed ones; medians of every part."""
    for _ in range(WARMUP):
        prefill()
    runs = [prefill() for _ in range(int(os.environ.get("VL_PREFILL_REPEATS", REPEATS)))]
    result = {key: float(np.median([r[key] for r in runs])) for key in runs[0] if key != "token"}
    result["token"] = runs[0]["token"]
    return result


def child_runner(package: str, image: str) -> dict:
    """mobius-vision's VisionLanguageGenerator: processor, vision, embedding, decoder."""
    from mobius_vision.runner import VisionLanguageGenerator

    generator = VisionLanguageGenerator(package, threads=THREADS)
    spent: dict[str, float] = {}
    for name in ("vision", "embedding", "decoder"):
        session = getattr(generator, name)

        def run(*args, _run=session.run, _name=name, **kwargs):
            start = time.perf_counter()
            out = _run(*args, **kwargs)
            spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - start
            return out

        session.run = run

    def prefill() -> dict:
        spent.clear()
        start = time.perf_counter()
        inputs = generator.prepare(PROMPT, [image], chat_template=False)
        prepared = time.perf_counter()
        token = next(generator.generate_from_inputs(inputs, max_new_tokens=1))
        total = time.perf_counter() - start
        parts = {f"{k}_ms": v * 1e3 for k, v in spent.items()}
        return dict(parts, total_ms=total * 1e3, preprocess_ms=(prepared - start) * 1e3,
                    token=int(token), prompt_tokens=int(inputs["input_ids"].shape[1]))  # fmt: skip

    return _timed(prefill)


def child_capture(package: str, image: str, out: str) -> dict:
    """Save the decoder's prefill inputs (mobius's processor, vision and embedding graphs)."""
    from mobius_vision.runner import VisionLanguageGenerator

    generator = VisionLanguageGenerator(package, threads=THREADS)
    run, saved = generator.decoder.run, {}

    def capture(names, feed, *args, **kwargs):
        saved.update({k: v for k, v in feed.items() if not k.startswith("past_key_values")})
        return run(names, feed, *args, **kwargs)

    generator.decoder.run = capture
    inputs = generator.prepare(PROMPT, [image], chat_template=False)
    token = next(generator.generate_from_inputs(inputs, max_new_tokens=1))
    np.savez(out, input_ids=inputs["input_ids"], **saved)
    return {"token": int(token), "saved": sorted(saved)}


def child_og(package: str, image: str) -> dict:
    """onnxruntime-genai: its multimodal processor, then the generator to the first token."""
    import onnxruntime_genai as og

    config = og.Config(package)
    options = {"intra_op_num_threads": THREADS, "inter_op_num_threads": 1}
    sections = {part: {"session_options": options} for part in ("decoder", "vision", "embedding")}
    config.overlay(json.dumps({"model": sections}))
    model = og.Model(config)
    processor = model.create_multimodal_processor()

    def prefill() -> dict:
        start = time.perf_counter()
        inputs = processor(PROMPT, images=og.Images.open(image))
        prepared = time.perf_counter()
        prompt_tokens = int(inputs["input_ids"].as_numpy().shape[-1])
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=prompt_tokens + 1)
        generator = og.Generator(model, params)
        generator.set_inputs(inputs)  # vision, embedding and the decoder's prefill
        generator.generate_next_token()
        token = int(generator.get_next_tokens()[0])
        total = time.perf_counter() - start
        return {"total_ms": total * 1e3, "preprocess_ms": (prepared - start) * 1e3,
                "model_ms": (total - (prepared - start)) * 1e3, "token": token,
                "prompt_tokens": prompt_tokens}  # fmt: skip

    return _timed(prefill)


def child_decoder(graph: str, feed: str) -> dict:
    """One decoder graph in plain ONNX Runtime: the captured prefill, empty cache."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    saved = dict(np.load(feed))
    inputs = {}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values"):
            inputs[i.name] = np.zeros((1, i.shape[1], 0, 128), np.float32)  # head size 128
        else:
            inputs[i.name] = saved[i.name]
    logits_index = [o.name for o in session.get_outputs()].index("logits")

    def prefill() -> dict:
        start = time.perf_counter()
        logits = session.run(None, inputs)[logits_index]
        total = time.perf_counter() - start
        return {"decoder_ms": total * 1e3, "token": int(logits[0, -1].argmax())}

    return _timed(prefill)


CHILDREN = {"runner": child_runner, "og": child_og, "decoder": child_decoder}


# --- parent ---------------------------------------------------------------------------


def run_child(python: Path, runner: str, *args: str, repeats: int = REPEATS) -> dict:
    """One path in its own process, timed ``repeats`` times; its JSON, or {"error": ...}."""
    import _peers

    env = {"VL_PREFILL_REPEATS": str(repeats)}
    return _peers.run_child(python, __file__, [runner, *args], env=env, timeout=1800)


def main() -> None:
    """Build what is missing, run every path in paired rounds, print parts and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (default 5)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=REPEATS,
        help=f"timed prefills per process after {WARMUP} warm-up (default {REPEATS})",
    )
    parser.add_argument(
        "--rebuild", action="store_true", help="build both packages again (after a mobius change)"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        runner, *rest = args.child
        children = dict(CHILDREN, capture=child_capture)
        print(json.dumps(children[runner](*rest)))
        return

    import _peers

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# vl_prefill_compare, {now}, Qwen2.5-VL-3B widths (8 vision blocks, 4 text layers),")
    print(f"# one {IMAGE_SIZE}x{IMAGE_SIZE} image, fp32, {THREADS} threads, {os.cpu_count()} CPUs")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    source = checkpoint()
    image = str(image_path())
    packages = builds(source, rebuild=args.rebuild)
    mobius, genai = packages["mobius"], packages["genai"]
    if not isinstance(mobius, Path):
        sys.exit(f"mobius: {mobius}")
    feed = mobius.parent / "prefill_inputs.npz"
    captured = run_child(Path(sys.executable), "capture", str(mobius), image, str(feed))
    if "error" in captured:
        sys.exit(f"capturing the decoder's inputs failed: {captured['error']}")
    here = Path(sys.executable)
    runs: dict[str, tuple[Path, str, list[str]]] = {
        "mobius (runner)": (here, "runner", [str(mobius), image]),
    }
    errors: dict[str, str] = {}
    try:
        og_python = _peers.peer_python("genai")
        runs["mobius (og)"] = (og_python, "og", [str(mobius), image])
        if isinstance(genai, Path):
            runs["genai (og)"] = (og_python, "og", [str(genai), image])
    except _peers.PeerUnavailable as error:
        errors["mobius (og)"] = str(error)
    if not isinstance(genai, Path):
        errors["genai (og)"] = genai
    runs["mobius decoder (ort)"] = (
        here,
        "decoder",
        [str(mobius / "decoder/model.onnx"), str(feed)],
    )
    if isinstance(genai, Path):
        decoder = genai / "decoder" / "model.onnx"
        runs["genai decoder (ort)"] = (here, "decoder", [str(decoder), str(feed)])
    for label, (python, runner, rest) in runs.items():
        command = f"{python} {__file__} --child {runner} {' '.join(rest)}"
        print(f"{label}: VL_PREFILL_REPEATS={args.repeats} {command}")
    print(
        "genai (og) = the builder's decoder/ + mobius's vision/ and embedding/: onnxruntime-genai"
        " 0.18's builder makes no Qwen2.5-VL vision or embedding graph"
    )

    def run_one(label: str, _round: int) -> dict:
        python, runner, rest = runs[label]
        return run_child(python, runner, *rest, repeats=args.repeats)

    per_round = _peers.paired_rounds(runs, args.rounds, run_one)
    print(f"load average after: {os.getloadavg()[0]:.2f} (other jobs skew the figures)")

    results: dict[str, dict] = {}
    for label, measured in per_round.items():
        failed = [m for m in measured if "error" in m]
        if failed:
            errors[label] = failed[0]["error"]
            continue
        keys = [k for k in measured[0] if k.endswith("_ms")]
        results[label] = {k: [m[k] for m in measured] for k in keys}
        results[label]["token"] = measured[0]["token"]
        results[label]["prompt_tokens"] = measured[0].get("prompt_tokens")

    columns = ("total_ms", "preprocess_ms", "vision_ms", "embedding_ms", "decoder_ms", "model_ms")
    header = ("path", "to first token ms", "preprocess", "vision", "embedding", "decoder",
              "vision+emb+decoder", "prompt tokens", "first token")  # fmt: skip
    print(f"\nms: median over {args.rounds} rounds of each process's median of {args.repeats}")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for label in runs:
        if label in errors:
            print(f"| {label} | failed: {errors[label]} |")
            continue
        r = results[label]
        cells = [label]
        for key in columns:
            cells.append(f"{np.median(r[key]):.1f}" if key in r else "-")
        if "model_ms" not in r and "vision_ms" in r:  # the runner: its three graphs
            cells[-1] = f"{np.median(np.sum([r[k] for k in columns[2:5]], axis=0)):.1f}"
        cells += [str(r["prompt_tokens"] or "-"), str(r["token"])]
        print("| " + " | ".join(cells) + " |")
    for label in errors:
        if label not in runs:
            print(f"| {label} | not run: {errors[label]} |")

    tokens = {label: r["token"] for label, r in results.items()}
    tokens["mobius (capture)"] = captured["token"]
    print(f"first tokens agree: {len(set(tokens.values())) == 1} {tokens}")
    print("ratios: median of the per-round ratios [range], target <= 1.0")

    def ratio(a: str, b: str, key: str, key_b: str | None = None) -> None:
        if a not in results or b not in results:
            return
        paired = [x / y for x, y in zip(results[a][key], results[b][key_b or key], strict=True)]
        mid = float(np.median(paired))
        print(
            f"{a} / {b} ({key if key_b is None else key + ' / ' + key_b}): {mid:.2f}x "
            f"[{min(paired):.2f}-{max(paired):.2f}] (<= 1.0: {mid <= 1.0})"
        )

    ratio("mobius (og)", "genai (og)", "total_ms")
    ratio("mobius (og)", "genai (og)", "model_ms")
    ratio("mobius (runner)", "genai (og)", "total_ms")
    ratio("mobius (runner)", "mobius (og)", "preprocess_ms")
    ratio("mobius decoder (ort)", "genai decoder (ort)", "decoder_ms")


if __name__ == "__main__":
    main()
