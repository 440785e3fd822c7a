"""Whisper transcription speed, side by side: mobius vs onnxruntime-genai's builder vs optimum.

Whisper tiny and base shapes (random seeded weights, see ``make_checkpoint``), one
speech clip of about 20 s (espeak-ng, else a tone in noise), 2 threads, greedy,
exactly ``NEW_TOKENS`` new tokens in every path (EOS never stops a path: the weights
are random, so without that the paths would do unequal work). The decoder prompt is
``<|startoftranscript|><|en|><|transcribe|>`` (3 tokens) everywhere.

Paths, each in its own child process:

- mobius: ``mobius build --ep cpu --dtype f32``, run by mobius-audio's
  ``WhisperGenerator`` (its own feature extraction: transformers'
  ``WhisperFeatureExtractor`` on its numpy path, then ORT encoder and decoder).
- genai: onnxruntime-genai 0.18's ``models/builder.py -p fp32 -e cpu`` (it builds
  ``WhisperForConditionalGeneration``), run by its own multimodal processor (the
  onnxruntime-extensions log-mel pipeline the builder writes) and generator.
- optimum: ``optimum-cli export onnx --task automatic-speech-recognition-with-past``,
  run by a plain ONNX Runtime loop (``encoder_model.onnx``, ``decoder_model.onnx`` for
  the prompt, ``decoder_with_past_model.onnx`` after it) with transformers' extractor
  as an optimum user gets it (its torch path: torch is in that environment).

RTF = (reading the WAV + feature extraction + encoder + decoding) / audio seconds.
Per path also: feature ms, encoder ms, first-token ms (encoder start to first token,
prompt step included) and decode tok/s (the tokens after the first). Rounds are
paired (forward then reverse order); the table shows medians, the ratio mobius RTF /
best peer RTF is the median of the per-round ratios, with their range.

    uv run python benchmarks/whisper_compare.py [--models tiny base] [--tools ...] [--rounds N]
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
import wave
from pathlib import Path

import numpy as np

THREADS = 2
NEW_TOKENS = 64
REPEATS = 3  # timed transcriptions per child; the median counts
RATE = 16000
SOT, EN, TRANSLATE, TRANSCRIBE, EOT = 50258, 50259, 50358, 50359, 50257
PROMPT = [SOT, EN, TRANSCRIBE]
PROMPT_TEXT = "<|startoftranscript|><|en|><|transcribe|>"

# openai/whisper-tiny and whisper-base shapes (vocab 51865, 80 mel bins, 30 s window).
SHAPES = {
    "tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, heads=6),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, heads=8),
}
TEXT = (
    "The old lighthouse stood at the edge of the cliff, watching over the harbour "
    "for more than a hundred years. Every evening the keeper climbed the narrow "
    "stairs, trimmed the wick and lit the great lamp, so that the fishing boats "
    "could find their way home through the fog and the rain. Nobody in the village "
    "remembered a night when the light had failed."
)


# --- inputs: checkpoint, tokenizer, audio -------------------------------------------


def _special_tokens() -> dict[str, int]:
    """Whisper's special tokens at their ids in the 51865-token multilingual vocabulary."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    names = ["<|endoftext|>", "<|startoftranscript|>"]
    # The first 99 languages, en first (large-v3 added a 100th, yue, and one more id)
    names += [f"<|{code}|>" for code in list(LANGUAGES)[:99]]
    names += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>"]
    names += ["<|nospeech|>", "<|notimestamps|>"]
    special = {name: EOT + i for i, name in enumerate(names)}
    assert special["<|transcribe|>"] == TRANSCRIBE and special["<|notimestamps|>"] == 50363
    return special


def _write_tokenizer(directory: Path) -> None:
    """A byte-level BPE tokenizer of Whisper's size and special-token ids, readable offline.

    256 byte pieces and filler pieces up to id 50256 (no merges: speed does not
    depend on the text), then the special tokens. ``tokenizer_class`` is
    ``WhisperTokenizer`` so that onnxruntime-extensions (genai's processor) reads it.
    """
    from tokenizers import pre_tokenizers

    from mobius_audio.testing import save_whisper_bpe_tokenizer

    vocab = {piece: i for i, piece in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({f"<filler{i}>": i for i in range(len(vocab), EOT)})
    special = _special_tokens()
    save_whisper_bpe_tokenizer(directory, {**vocab, **special}, list(special))


def make_checkpoint(name: str) -> Path:
    """``$MOBIUS_BENCH_DIR/checkpoints/whisper-<name>``: the real model's shapes, seeded random
    fp32 weights (``torch.manual_seed(0)``), the real feature extractor, a stand-in tokenizer."""
    import _peers

    directory = _peers.WORKDIR / "checkpoints" / f"whisper-{name}"
    if (directory / "config.json").exists():
        return directory
    import torch
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    shape = SHAPES[name]
    config = WhisperConfig(
        vocab_size=51865,
        num_mel_bins=80,
        d_model=shape["d_model"],
        encoder_layers=shape["encoder_layers"],
        decoder_layers=shape["decoder_layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=4 * shape["d_model"],
        decoder_ffn_dim=4 * shape["d_model"],
        max_source_positions=1500,
        max_target_positions=448,
        bos_token_id=EOT,
        eos_token_id=EOT,
        pad_token_id=EOT,
        decoder_start_token_id=SOT,
        suppress_tokens=None,
        begin_suppress_tokens=None,
        architectures=["WhisperForConditionalGeneration"],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    generation = model.generation_config
    generation.decoder_start_token_id = SOT
    generation.eos_token_id = generation.pad_token_id = EOT
    generation.lang_to_id = {"<|en|>": EN}
    generation.task_to_id = {"translate": TRANSLATE, "transcribe": TRANSCRIBE}
    generation.language, generation.task = "en", "transcribe"
    generation.is_multilingual = True
    # No no_timestamps_token_id: every path decodes the same 3-token prompt, and a
    # random model's timestamp-like ids do not split mobius's window into segments.
    generation.forced_decoder_ids = None
    generation.suppress_tokens = generation.begin_suppress_tokens = None
    tmp = directory.with_name(directory.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(tmp)
    _write_tokenizer(tmp)
    tmp.rename(directory)
    return directory


def make_audio() -> tuple[Path, str]:
    """``$MOBIUS_BENCH_DIR/audio/speech.wav`` at 16 kHz mono, and what it holds."""
    import _peers

    path = _peers.WORKDIR / "audio" / "speech.wav"
    kind = "espeak-ng speech" if shutil.which("espeak-ng") else "a tone in noise"
    if path.exists():
        return path, kind
    path.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("espeak-ng"):
        raw = path.with_suffix(".raw.wav")
        subprocess.run(["espeak-ng", "-s", "140", "-w", str(raw), TEXT], check=True)
        with wave.open(str(raw), "rb") as wav:
            rate = wav.getframerate()
            samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2") / 32768
        raw.unlink()
        import soxr

        audio = soxr.resample(samples.astype(np.float32), rate, RATE, quality="HQ")
    else:
        t = np.arange(20 * RATE) / RATE
        rng = np.random.default_rng(0)
        audio = 0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.3 * t)
        audio = audio + 0.05 * rng.standard_normal(t.shape)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes((np.clip(audio, -1, 1) * 32767).round().astype("<i2").tobytes())
    return path, kind


def audio_seconds(path: Path) -> float:
    """The WAV's length in seconds."""
    with wave.open(str(path), "rb") as wav:
        return wav.getnframes() / wav.getframerate()


# --- builds ---------------------------------------------------------------------------


def build_command(tool: str, source: Path, out: Path) -> list[str]:
    """The command line that builds the Whisper checkpoint ``source`` into ``out`` with ``tool``."""
    import _peers

    if tool == "mobius":
        return [*_peers.mobius_command(), "build", "--model", str(source), str(out), "--quiet",
                *_peers.MOBIUS_EP, "--dtype", "f32"]  # fmt: skip
    if tool == "genai":
        python = _peers.peer_python("genai")
        cache = _peers.WORKDIR / "genai-cache"
        return [str(python), str(_peers.genai_builder(python)), "-i", str(source), "-o", str(out),
                "-p", "fp32", "-e", "cpu", "-c", str(cache)]  # fmt: skip
    if tool == "optimum":
        python = _peers.peer_python("optimum")
        return [str(python.parent / "optimum-cli"), "export", "onnx", "--model", str(source),
                "--task", "automatic-speech-recognition-with-past", str(out)]  # fmt: skip
    raise ValueError(tool)


BUILT = {  # a file each finished build holds
    "mobius": "decoder/model.onnx",
    "genai": "decoder.onnx",
    "optimum": "decoder_with_past_model.onnx",
}


def build(tool: str, model: str, source: Path) -> tuple[Path, list[str], str | None]:
    """``(out, command, error)``: the build of ``source`` by ``tool``, reused when present."""
    import _peers

    out = _peers.WORKDIR / "builds" / f"whisper-{model}" / tool
    try:
        command = build_command(tool, source, out)
    except _peers.PeerUnavailable as error:
        return out, [], str(error)
    if (out / BUILT[tool]).exists():
        return out, command, None
    shutil.rmtree(out, ignore_errors=True)
    log = out.with_name(out.name + ".log")
    _, _, code = _peers.run_measured(command, log, timeout=1800)
    if code or not (out / BUILT[tool]).exists():
        return out, command, f"exit {code}: {_peers.short_error(log.read_text(errors='replace'))}"
    return out, command, None


# --- children: each prints one JSON line ------------------------------------------------


def summarize(runs: list[dict]) -> dict:
    """The median of each figure over the timed runs; the first run's tokens."""
    keys = ("total_ms", "features_ms", "encoder_ms", "first_ms", "tok_s")
    out = {
        k: float(np.median([r[k] for r in runs if r.get(k) is not None] or [np.nan])) for k in keys
    }
    out["tokens"] = runs[0]["tokens"]
    return out


def child_mobius(package: str, wav: str) -> dict:
    """mobius-audio's WhisperGenerator: read the WAV, features, encoder, decoder loop."""
    from mobius_audio.audio_file import read_audio
    from mobius_audio.whisper_generate import WhisperGenerator

    generator = WhisperGenerator(package, threads=THREADS)
    box: dict[str, float] = {}

    def timing(name: str, function):
        def wrapped(*args, **kwargs):
            start = time.perf_counter()
            result = function(*args, **kwargs)
            box[name] = time.perf_counter() - start
            return result

        return wrapped

    # Instance attributes over the bound methods: only to time the two stages.
    generator.log_mel = timing("features", generator.log_mel)
    generator._encode_window = timing("encoder", generator._encode_window)

    def transcribe(new_tokens: int) -> dict:
        start = time.perf_counter()
        audio = read_audio(wav, generator.sampling_rate)
        read = time.perf_counter() - start
        tokens = list(
            generator.transcribe_ids(
                audio, generator.sampling_rate, language="en", task="transcribe",
                max_new_tokens=new_tokens, eos_token_ids=[],
            )
        )  # fmt: skip
        total = time.perf_counter() - start
        stats = generator.stats
        assert stats.windows == 1 and len(tokens) == new_tokens, (stats.windows, len(tokens))
        assert stats.prompt == PROMPT, stats.prompt
        first = stats.time_to_first_token_s - box["features"]
        return {
            "total_ms": total * 1e3,
            "features_ms": (read + box["features"]) * 1e3,
            "encoder_ms": box["encoder"] * 1e3,
            "first_ms": first * 1e3,
            "tok_s": stats.decode_tokens_per_s,
            "tokens": tokens,
        }

    transcribe(8)
    return summarize([transcribe(NEW_TOKENS) for _ in range(REPEATS)])


def _ort_session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def child_genai(package: str, wav: str) -> dict:
    """onnxruntime-genai: its processor (WAV decoding, log-mel) and its generator."""
    import onnxruntime_genai as og

    config = og.Config(package)
    options = {"intra_op_num_threads": THREADS, "inter_op_num_threads": 1}
    config.overlay(
        json.dumps(
            {
                "model": {
                    "encoder": {"session_options": options},
                    "decoder": {"session_options": options},
                }
            }
        )
    )
    model = og.Model(config)
    processor = model.create_multimodal_processor()

    def transcribe(new_tokens: int) -> dict:
        start = time.perf_counter()
        inputs = processor(PROMPT_TEXT, audios=og.Audios.open(wav))
        features = time.perf_counter() - start
        params = og.GeneratorParams(model)
        total = len(PROMPT) + new_tokens
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        generator = og.Generator(model, params)
        first_start = time.perf_counter()
        generator.set_inputs(inputs)
        generator.generate_next_token()  # the encoder, the prompt, the first token
        first = time.perf_counter() - first_start
        decode_start = time.perf_counter()
        while not generator.is_done():
            generator.generate_next_token()
        end = time.perf_counter()
        sequence = [int(t) for t in generator.get_sequence(0)]
        assert sequence[: len(PROMPT)] == PROMPT, sequence[: len(PROMPT)]
        tokens = sequence[len(PROMPT) :]
        assert len(tokens) == new_tokens, len(tokens)
        return {
            "total_ms": (end - start) * 1e3,
            "features_ms": features * 1e3,
            "first_ms": first * 1e3,
            "tok_s": (len(tokens) - 1) / (end - decode_start),
            "tokens": tokens,
        }

    transcribe(8)
    runs = [transcribe(NEW_TOKENS) for _ in range(REPEATS)]
    # The generator runs the encoder inside its first step: time the same graph alone.
    encoder = _ort_session(Path(package) / "encoder.onnx")
    inputs = processor(PROMPT_TEXT, audios=og.Audios.open(wav))
    feed = {"audio_features": np.array(inputs["audio_features"].as_numpy())}
    encoder.run(None, feed)
    for run in runs:
        start = time.perf_counter()
        encoder.run(None, feed)
        run["encoder_ms"] = (time.perf_counter() - start) * 1e3
    return summarize(runs)


def child_optimum(package: str, wav: str) -> dict:
    """optimum's export in a plain ORT loop; transformers' extractor as its environment runs it."""
    import torch
    from transformers import WhisperFeatureExtractor

    torch.set_num_threads(THREADS)
    extractor = WhisperFeatureExtractor.from_pretrained(package, trust_remote_code=False)
    encoder = _ort_session(Path(package) / "encoder_model.onnx")
    first_decoder = _ort_session(Path(package) / "decoder_model.onnx")
    decoder = _ort_session(Path(package) / "decoder_with_past_model.onnx")
    past_names = [i.name for i in decoder.get_inputs() if i.name.startswith("past_key_values")]
    first_outputs = [o.name for o in first_decoder.get_outputs()]
    outputs = [o.name for o in decoder.get_outputs()]
    decoder_inputs = {i.name for i in decoder.get_inputs()}

    def transcribe(new_tokens: int) -> dict:
        start = time.perf_counter()
        with wave.open(wav, "rb") as f:
            samples = np.frombuffer(f.readframes(f.getnframes()), "<i2")
        audio = samples.astype(np.float32) / 32768
        features = extractor(audio, sampling_rate=RATE, return_tensors="np").input_features
        features_s = time.perf_counter() - start
        encoder_start = time.perf_counter()
        (hidden,) = encoder.run(["last_hidden_state"], {"input_features": features})
        encoder_s = time.perf_counter() - encoder_start
        result = dict(
            zip(
                first_outputs,
                first_decoder.run(
                    None,
                    {"input_ids": np.array([PROMPT], np.int64), "encoder_hidden_states": hidden},
                ),
                strict=True,
            )
        )
        tokens = [int(result["logits"][0, -1].argmax())]
        first_s = time.perf_counter() - encoder_start
        past = {n: result[n.replace("past_key_values", "present", 1)] for n in past_names}
        decode_start = time.perf_counter()
        for _ in range(new_tokens - 1):
            feed = {"input_ids": np.array([[tokens[-1]]], np.int64), **past}
            if "encoder_hidden_states" in decoder_inputs:
                feed["encoder_hidden_states"] = hidden
            step = dict(zip(outputs, decoder.run(None, feed), strict=True))
            tokens.append(int(step["logits"][0, -1].argmax()))
            for name in past_names:  # the cross cache stays; the self cache grows
                present = name.replace("past_key_values", "present", 1)
                if present in step:
                    past[name] = step[present]
        end = time.perf_counter()
        return {
            "total_ms": (end - start) * 1e3,
            "features_ms": features_s * 1e3,
            "encoder_ms": encoder_s * 1e3,
            "first_ms": first_s * 1e3,
            "tok_s": (new_tokens - 1) / (end - decode_start),
            "tokens": tokens,
        }

    transcribe(8)
    return summarize([transcribe(NEW_TOKENS) for _ in range(REPEATS)])


CHILDREN = {"mobius": child_mobius, "genai": child_genai, "optimum": child_optimum}


# --- parent -----------------------------------------------------------------------------


def main() -> None:
    """Make the inputs, build what is missing, run the rounds, print the tables and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=tuple(SHAPES), default=list(SHAPES))
    tools = tuple(CHILDREN)
    parser.add_argument("--tools", nargs="+", choices=tools, default=list(tools))
    parser.add_argument(
        "--rounds", type=int, default=5, help="paired rounds, forward then reverse (default 5)"
    )
    parser.add_argument(
        "--huge-pages-everywhere",
        action="store_true",
        help="give the peers too the huge-page tunable that the mobius command sets for "
        "its runner, for a comparison on equal memory",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("TOOL", "PACKAGE", "WAV"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        tool, package, wav = args.child
        print(json.dumps(CHILDREN[tool](package, wav)))
        return

    import _peers

    wav, kind = make_audio()
    seconds = audio_seconds(wav)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# whisper_compare, {now}, {os.cpu_count()} CPUs, {THREADS} threads, greedy")
    print(f"audio: {wav} ({kind}, {seconds:.1f} s, 16 kHz mono); prompt {PROMPT}; "
          f"{NEW_TOKENS} new tokens forced in every path (EOS never stops)")  # fmt: skip
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    command_env = _peers.mobius_command_environment()
    everywhere = " and the peers' (--huge-pages-everywhere)" if args.huge_pages_everywhere else ""
    print(f"mobius command environment, in mobius's runs{everywhere}: {command_env or 'none'}")
    for model in args.models:
        source = make_checkpoint(model)
        print(f"\n## whisper-{model} shapes ({SHAPES[model]}), random weights: {source}")
        runs, errors = {}, {}
        for tool in args.tools:
            out, command, error = build(tool, model, source)
            print(f"build {tool}: {' '.join(command) if command else '-'}")
            if error:
                errors[tool] = "build " + error
                continue
            try:
                python = Path(sys.executable) if tool == "mobius" else _peers.peer_python(tool)
            except _peers.PeerUnavailable as exc:
                errors[tool] = str(exc)
                continue
            runs[tool] = (python, out)
            print(f"run {tool}: {python} {Path(__file__).resolve()} --child {tool} {out} {wav}")

        def run_one(tool: str, _round: int, runs: dict = runs) -> dict:  # this model's runs
            python, package = runs[tool]
            env = command_env if tool == "mobius" or args.huge_pages_everywhere else {}
            return _peers.run_child(python, __file__, [tool, package, wav], env=env, timeout=1800)

        per_round = _peers.paired_rounds(runs, args.rounds, run_one)
        results = dict(errors)
        for tool, measured in per_round.items():
            failed = [m for m in measured if "error" in m]
            if failed:
                results[tool] = failed[0]
                continue
            results[tool] = {
                k: float(np.median([m[k] for m in measured]))
                for k in ("total_ms", "features_ms", "encoder_ms", "first_ms", "tok_s")
            }
            results[tool]["rtf_rounds"] = [m["total_ms"] / 1e3 / seconds for m in measured]
            results[tool]["tokens"] = measured[0]["tokens"]
        print(f"load average after: {os.getloadavg()[0]:.2f} (other jobs skew the figures)")
        header = ("path", "RTF", "total ms", "features ms", "encoder ms", "first-token ms", "decode tok/s",
                  "same tokens as mobius")  # fmt: skip
        reference = results.get("mobius", {}).get("tokens")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
        for tool in args.tools:
            r = results.get(tool, {"error": "not run"})
            if "error" in r:
                print(f"| {tool} | failed: {r['error']} |")
                continue
            cells = [
                tool,
                f"{np.median(r['rtf_rounds']):.4f}",
                f"{r['total_ms']:.0f}",
                f"{r['features_ms']:.1f}",
                f"{r['encoder_ms']:.1f}",
                f"{r['first_ms']:.1f}",
                f"{r['tok_s']:.1f}",
                f"{_peers.match_length(r['tokens'], reference)}/{NEW_TOKENS}" if reference else "-",
            ]
            print("| " + " | ".join(cells) + " |")
        print(f"RTF: median of {args.rounds} rounds; first-token ms: encoder start to the first "
              "token (encoder, prompt step); genai's encoder ms: its encoder.onnx alone in ORT")  # fmt: skip
        mobius = results.get("mobius", {}).get("rtf_rounds")
        peers = {t: results[t]["rtf_rounds"] for t in args.tools
                 if t != "mobius" and "rtf_rounds" in results.get(t, {})}  # fmt: skip
        if mobius and peers:
            best = min(peers, key=lambda t: np.median(peers[t]))
            for tool, rounds in peers.items():
                paired = [a / b for a, b in zip(mobius, rounds, strict=True)]
                mid = float(np.median(paired))
                note = f" (best peer; target <= 1.0x: {mid <= 1.0})" if tool == best else ""
                print(f"mobius RTF / {tool} RTF: {mid:.2f}x "
                      f"[{min(paired):.2f}-{max(paired):.2f}]{note}")  # fmt: skip


if __name__ == "__main__":
    main()
