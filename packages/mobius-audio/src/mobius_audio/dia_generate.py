"""Speak a dialogue script with a Dia package (:mod:`mobius_audio.tasks_dia`) and a DAC package.

The text is UTF-8 bytes with ``[S1]``, ``[S2]`` and ``<pad>`` as ids 1, 2 and 0
(transformers' ``DiaTokenizer``). Decoding starts from one all-``bos`` frame; a
channel delayed by ``d`` frames is held at ``bos`` for its first ``d`` frames after
it (``DiaProcessor``'s delay pattern). With guidance the encoder also runs an
all-``<pad>`` text of the same mask, and each step decodes both halves. Each frame
is chosen by :mod:`mobius_audio.dia_sampling`; a channel that ended gets ``pad``.
When every channel of every row has ended (or after ``max_new_tokens`` frames) the
delays are undone and the frames between the ``bos`` frame and channel 0's ``eos``
go to the codec, one text at a time, as ``DiaProcessor.batch_decode`` does.

Example::

    from mobius_audio.dia_generate import DiaGenerator, DiaSampling

    dia = DiaGenerator("dia-out/", codec="dac-out/")
    waveform = dia.speak("[S1] Hello. [S2] Hi!", DiaSampling(do_sample=True), seed=0)

:func:`run_cli` is the ``mobius generate`` runner of the packages :func:`is_dia_package`
accepts. Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius_audio.codec_runner import AudioCodec, is_codec_package
from mobius_audio.dia_sampling import DiaSampling, EndForcing, filter_eos, guide, pick, warp

GRAPHS = ("encoder", "decoder")
SPECIAL_TOKENS = {"<pad>": 0, "[S1]": 1, "[S2]": 2}
DEFAULT_OUTPUT = "dialogue.wav"


def read_config(package: Path) -> dict | None:
    """The package's ``config.json`` as a dict, or None when it is missing or not an object."""
    try:
        data = json.loads((package / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_dia_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` holds Dia's encoder and decoder graphs and its ``config.json``."""
    package = Path(package)
    config = read_config(package)
    graphs = all((package / g / "model.onnx").is_file() for g in GRAPHS)
    return graphs and config is not None and config.get("model_type") == "dia"


def tokenize(text: str) -> list[int]:
    """``DiaTokenizer``'s ids: the special tokens by id, everything else as its UTF-8 bytes."""
    pattern = "(" + "|".join(map(re.escape, SPECIAL_TOKENS)) + ")"
    ids: list[int] = []
    for piece in re.split(pattern, text):
        ids += [SPECIAL_TOKENS[piece]] if piece in SPECIAL_TOKENS else list(piece.encode("utf-8"))
    return ids


def run_named(session, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of an ONNX Runtime ``session`` on ``feeds``, by name."""
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def text_batch(texts: list[str], max_text: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ``input_ids`` and ``attention_mask`` (int64) of ``texts``, each 1 to ``max_text`` bytes."""
    rows = [tokenize(text) for text in texts]
    for text, row in zip(texts, rows, strict=True):
        if not row or len(row) > max_text:
            raise MobiusError(
                f"the text {text[:40]!r} has {len(row)} bytes: Dia reads 1 to {max_text}"
            )
    ids = np.zeros((len(rows), max(map(len, rows))), np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return ids, mask


def first_decoder_feeds(decoder, encoded: dict[str, np.ndarray], mask: np.ndarray) -> dict:
    """The decoder's inputs but ``input_ids``: the text mask, the encoder's cross caches, empty self caches."""
    feeds = {"encoder_attention_mask": mask}
    for graph_input in decoder.get_inputs():
        name = graph_input.name
        if name.endswith((".encoder.key", ".encoder.value")):
            feeds[name] = encoded["present." + name[len("past_key_values.") :]]
        elif name.endswith((".decoder.key", ".decoder.value")):
            _, heads, _, dim = graph_input.shape
            feeds[name] = np.zeros((mask.shape[0], heads, 0, dim), np.float32)
    return feeds


def carry_cache(feeds: dict, outputs: dict[str, np.ndarray]) -> None:
    """Feed a step's ``present.*`` outputs back as the next step's ``past_key_values.*``."""
    for name, value in outputs.items():
        if name.startswith("present."):
            feeds["past_key_values." + name[len("present.") :]] = value


def config_int(section: dict, key: str, low: int, where: str) -> int:
    """``section[key]`` checked to be an int of at least ``low``; ``where`` names the file."""
    value = section.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise MobiusError(f"{where}: {key} {value!r} is not an integer >= {low}")
    return value


class DiaPackage:
    """What the runner reads of ``config.json``, checked: ids, channels, delays, text length.

    transformers' ``DiaConfig`` reads the file, as at build time: it fills the fields a
    hub config leaves at their defaults and moves older top-level token ids to the decoder.
    """

    def __init__(self, package: Path) -> None:
        from transformers import DiaConfig

        where = str(package / "config.json")
        try:
            config = DiaConfig.from_pretrained(str(package), trust_remote_code=False)
        except Exception as exc:  # transformers' own refusal, in one line
            raise MobiusError(
                f"cannot read {where} as a Dia config: {' '.join(str(exc).split())}"
            ) from None
        decoder, encoder = vars(config.decoder_config), vars(config.encoder_config)
        self.vocab_size = config_int(decoder, "vocab_size", 4, where)
        self.channels = config_int(decoder, "num_channels", 1, where)
        self.bos, self.eos, self.pad = (config_int(decoder, f"{k}_token_id", 1, where) for k in ("bos", "eos", "pad"))  # fmt: skip
        in_vocabulary = max(self.bos, self.eos, self.pad) < self.vocab_size
        if not in_vocabulary or self.eos >= min(self.bos, self.pad):
            raise MobiusError(f"{where}: eos must come before bos and pad, all below vocab_size")
        delays = config.delay_pattern
        if not isinstance(delays, list) or len(delays) != self.channels:
            raise MobiusError(f"{where}: delay_pattern must hold {self.channels} delays")
        for delay in delays:
            if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay < 4096:
                raise MobiusError(f"{where}: delay {delay!r} is not a frame count")
        self.delays = delays
        self.max_text = config_int(encoder, "max_position_embeddings", 1, where)
        self.max_frames = config_int(decoder, "max_position_embeddings", 2, where)


def generation_defaults(package: Path) -> DiaSampling:
    """The package's ``generation_config.json`` as :class:`DiaSampling` (transformers' defaults where unset)."""
    path = package / "generation_config.json"
    if not path.is_file():
        return DiaSampling()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"cannot read {path}: {exc}") from None
    sampling = DiaSampling()
    fields = {
        "do_sample": (bool,), "temperature": (int, float), "top_k": (int,),
        "top_p": (int, float), "guidance_scale": (int, float),
    }  # fmt: skip
    for name, types in fields.items():
        value = config.get(name) if isinstance(config, dict) else None
        if value is None:
            continue
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise MobiusError(f"{path}: {name} {value!r} is not a {types[0].__name__}")
        setattr(sampling, name, value)
    return sampling


def check_sampling(sampling: DiaSampling) -> DiaSampling:
    """A checked copy: refuses what transformers refuses; Dia lifts a temperature below 1 to 1."""
    if sampling.temperature < 0 or not 0 < sampling.top_p <= 1:
        raise MobiusError("temperature must be >= 0 and top-p in (0, 1]")
    if sampling.top_k is not None and sampling.top_k < 0:
        raise MobiusError(f"--top-k {sampling.top_k} must be >= 0")
    if sampling.guided and sampling.guidance_scale < 1:
        raise MobiusError(f"--guidance-scale {sampling.guidance_scale:g} must be 1 (off) or more")
    return replace(sampling, temperature=max(float(sampling.temperature), 1.0))


class DiaGenerator:
    """A Dia package and a DAC package in ONNX Runtime."""

    def __init__(self, package_dir, codec, threads: int | None = None) -> None:
        self.package = Path(package_dir)
        if not is_dia_package(self.package):
            raise MobiusError(
                f"{self.package} is not a Dia package (encoder/, decoder/ and a dia config.json)"
            )
        self.config = DiaPackage(self.package)
        self.encoder, self.decoder = (open_session(self.package / g / "model.onnx", threads) for g in GRAPHS)  # fmt: skip
        self.codec = self._open_codec(codec, threads)

    def _open_codec(self, codec, threads) -> AudioCodec:
        if codec is None:
            raise MobiusError(
                "Dia needs its audio codec: --codec DAC_DIR, a package built with "
                "mobius build --model descript/dac_44khz DAC_DIR"
            )
        if not is_codec_package(codec):
            raise MobiusError(f"--codec {codec} is not an audio-codec package (a DAC build)")
        opened = AudioCodec(codec, threads=threads)
        size = opened.config.get("codebook_size")
        if opened.num_codebooks != self.config.channels or size != self.config.eos:
            raise MobiusError(
                f"--codec {codec} has {opened.num_codebooks} codebooks of {size} codes; this Dia "
                f"writes {self.config.channels} of {self.config.eos}"
            )
        return opened

    @property
    def sampling_rate(self) -> int:
        return self.codec.sampling_rate

    def generate_codes(
        self, texts: list[str], sampling: DiaSampling, max_new_tokens: int, seed: int | None = None
    ) -> np.ndarray:
        """The delayed frames int64 ``[batch, 1 + generated, channels]``, as transformers' ``generate`` returns them."""
        config = self.config
        if not max(config.delays) < max_new_tokens < config.max_frames:
            raise MobiusError(
                f"--max-new-tokens {max_new_tokens}: Dia makes more frames than its longest "
                f"delay ({max(config.delays)}) and fewer than its {config.max_frames} positions"
            )
        sampling = check_sampling(sampling)
        ids, mask = text_batch(texts, config.max_text)
        batch = len(texts)
        if sampling.guided:  # the unconditioned half: all <pad>, the same mask
            ids, mask = np.concatenate([ids, np.zeros_like(ids)]), np.concatenate([mask, mask])
        encoded = run_named(self.encoder, {"input_ids": ids, "attention_mask": mask})
        feeds = first_decoder_feeds(self.decoder, encoded, mask)
        rng = np.random.default_rng(seed)
        delays = np.asarray(config.delays)
        frames = np.full((batch, 1, config.channels), config.bos, np.int64)
        running = np.ones((batch, config.channels), bool)
        max_length = max_new_tokens + 1
        forcing = EndForcing(config.delays, batch, config.eos, max_length - delays.max() - 1)
        while True:
            step = frames[:, -1:]
            step = np.concatenate([step, step]) if sampling.guided else step
            outputs = run_named(self.decoder, {**feeds, "input_ids": step})
            carry_cache(feeds, outputs)
            scores = self._scores(outputs["logits"][:, -1], sampling, batch)
            scores = forcing(warp(scores, sampling), frames.shape[1])
            chosen = np.where(running, pick(scores, sampling.do_sample, rng), config.pad)
            length = frames.shape[1]  # the new frame's index: held at bos within each delay
            chosen = np.where(length <= delays, config.bos, chosen)
            frames = np.concatenate([frames, chosen[:, None]], axis=1)
            running &= chosen != config.eos
            if not running.any() or frames.shape[1] >= max_length:
                return frames

    def _scores(self, logits: np.ndarray, sampling: DiaSampling, batch: int) -> np.ndarray:
        """Steps 1 to 3 of :mod:`mobius_audio.dia_sampling` on ``logits [rows, channels, vocab]``."""
        scores = logits.astype(np.float32)
        if sampling.guided:
            scores = guide(scores[:batch], scores[batch:], sampling.guidance_scale, sampling.top_k)
        if sampling.temperature != 1.0:
            scores = scores / sampling.temperature
        return filter_eos(scores, self.config.eos)

    def undelay(self, frames: np.ndarray) -> list[np.ndarray]:
        """Each row's codes ``[channels, frames]``: delays undone, from the ``bos`` frame to channel 0's ``eos``."""
        length = frames.shape[1]
        rows = []
        for row in frames:
            start = int((row[:, 0] == self.config.bos).sum())
            end = length - int((row[:, 0] == self.config.pad).sum()) - 1
            # Channel c's frame t was written at t + delay[c] (clamped: cut off below).
            later = [np.minimum(np.arange(length) + d, length - 1) for d in self.config.delays]
            shifted = np.stack([row[t, c] for c, t in enumerate(later)])
            rows.append(shifted[:, start:end])
        return rows

    def to_audio(self, codes: np.ndarray) -> np.ndarray:
        """The codec's mono waveform (float32) of ``codes [channels, frames]``."""
        if codes.shape[1] == 0:
            return np.zeros(0, np.float32)
        return self.codec.decode(codes[None])[0, 0]

    def speak(
        self,
        text: str,
        sampling: DiaSampling | None = None,
        max_new_tokens: int | None = None,
        seed: int | None = None,
    ) -> np.ndarray:
        """The waveform of ``text`` at :attr:`sampling_rate`.

        Defaults: the package's sampling settings, and as many frames as the decoder has
        positions for.
        """
        sampling = sampling or generation_defaults(self.package)
        max_new_tokens = max_new_tokens or self.config.max_frames - 1
        frames = self.generate_codes([text], sampling, max_new_tokens, seed)
        return self.to_audio(self.undelay(frames)[0])


def sampling_from_options(package: Path, options: dict) -> DiaSampling:
    """The generation config's settings, overridden by the command line's.

    ``--temperature 0`` decodes greedily; ``--do-sample``, ``--temperature``,
    ``--top-k`` or ``--top-p`` samples; otherwise the config's ``do_sample`` decides.
    """
    sampling = generation_defaults(package)
    for name in ("temperature", "top_k", "top_p"):
        if options.get(name) is not None:
            setattr(sampling, name, options[name])
            sampling.do_sample = True
    if options.get("do_sample"):
        sampling.do_sample = True
    if options.get("guidance_scale") is not None:  # core's --guidance-scale
        sampling.guidance_scale = options["guidance_scale"]
    if options.get("temperature") == 0:
        sampling.do_sample, sampling.temperature = False, 1.0
    return sampling


def run_cli(package_dir, prompt: str, options: dict) -> int:
    """``mobius generate DIA "[S1] ..." --codec DAC [--output x.wav] [--seed N] [--temperature 0]``."""
    from mobius_audio.tts import write_wav

    package = Path(package_dir)
    dia = DiaGenerator(package, options.get("dia_codec"), threads=options.get("threads"))
    sampling = sampling_from_options(package, options)
    max_new_tokens = options.get("max_new_tokens") or 128
    frames = dia.generate_codes([prompt], sampling, max_new_tokens, options.get("seed"))
    codes = dia.undelay(frames)[0]
    waveform = dia.to_audio(codes)
    output = options.get("output_file") or DEFAULT_OUTPUT
    write_wav(output, waveform, dia.sampling_rate)
    seconds = waveform.size / dia.sampling_rate
    print(
        f"wrote {output}: {seconds:.2f} s at {dia.sampling_rate} Hz ({codes.shape[1]} frames)",
        file=sys.stderr,
    )
    return 0
