"""Make music from a text prompt with a text-to-music package (:mod:`mobius_audio.tasks_music`: MusicGen).

Generation follows transformers' ``MusicgenForConditionalGeneration.generate``:

- the text encoder runs once; with classifier-free guidance (a scale above 1) the
  decoder runs on a doubled batch whose second half reads no text (all-zero
  cross-attention cache and mask), and each step's logits are
  ``uncond + (cond - uncond) * scale``;
- the decoder starts from the decoder start id and writes one code per codebook a
  step in the *delay pattern*: codebook ``k`` (stereo: codebook pair ``k``) runs
  ``k`` steps behind the first, the start id filling the steps before it begins
  and after it ends; after ``N`` steps each codebook holds ``N + 1 - C`` codes
  (``C`` codebooks per channel), which the pattern's undoing lines up as frames;
- the codes are picked greedily, or sampled (temperature, top-k, top-p) with a numpy
  generator seeded by ``seed``: the same seed gives the same music (not the same
  draws as torch's);
- the audio decoder (EnCodec) turns the frames into the waveform.

MusicGen-Melody packages (the prefix form, :class:`PrefixMusicGenerator`) prepend
their conditioning to the first step instead, and may follow a melody clip's chroma
(:mod:`mobius_audio.melody_features`).

:class:`MusicGenerator` is the Python API; :func:`run_cli` is the ``mobius generate``
runner of the packages :func:`is_music_package` accepts.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import load_tokenizer, read_graph, sample_next_token
from mobius_audio.tasks_music import GRAPHS
from mobius_audio.tts import open_sessions, write_wav

DEFAULT_OUTPUT = "music.wav"


def is_music_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` holds the three graphs of the text-to-music contract."""
    return all((Path(package) / graph / "model.onnx").is_file() for graph in GRAPHS)


def _read_json(path: Path, required: bool = True) -> dict:
    if not required and not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MobiusError(f"{path} is not a JSON object")
    return data


def _int_in(value, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MobiusError(f"{what} {value!r} is not an integer in {low}..{high}")
    return value


@dataclass
class Sampling:
    """How each code is picked: greedy (``do_sample`` false or ``temperature`` 0) or sampled."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None


def delay_pattern(codebooks: int, channels: int, length: int) -> np.ndarray:
    """``[codebooks, length]`` bool: where the decoder writes a code (the rest hold the start id).

    Codebook ``r`` is delayed by ``r // channels`` steps (stereo codebooks alternate
    left and right, a pair sharing a delay) and writes ``length - codebooks / channels``
    codes, from step ``delay + 1``.
    """
    per_channel = codebooks // channels
    delays = np.arange(codebooks) // channels
    steps = np.arange(length)
    first, last = delays + 1, delays + length - per_channel  # inclusive
    return (steps[None] >= first[:, None]) & (steps[None] <= last[:, None])


def guided(guidance_scale: float | None) -> bool:
    """Whether classifier-free guidance runs: a scale above 1, as transformers decides."""
    return guidance_scale is not None and guidance_scale > 1


class MusicGenerator:
    """A text-to-music package in ONNX Runtime: its three sessions, tokenizer and settings."""

    def __init__(self, package_dir: str | os.PathLike, threads: int | None = None) -> None:
        self.package = Path(package_dir)
        if not is_music_package(self.package):
            raise MobiusError(
                f"{self.package} is not a text-to-music package (text_encoder/, decoder/ and "
                "audio_decoder/ model.onnx)"
            )
        self.sessions = open_sessions(self.package, GRAPHS, threads)
        self._read_settings()
        self.tokenizer = load_tokenizer(self.package)

    def _read_settings(self) -> None:
        config = _read_json(self.package / "config.json")
        decoder, codec = config.get("decoder"), config.get("audio_encoder")
        if not isinstance(decoder, dict) or not isinstance(codec, dict):
            raise MobiusError(f"{self.package / 'config.json'} has no decoder / audio_encoder")
        where = f"{self.package / 'config.json'}:"
        self.vocab_size = _int_in(decoder.get("vocab_size"), 1, 1 << 20, f"{where} vocab_size")
        self.num_codebooks = _int_in(decoder.get("num_codebooks"), 1, 64, f"{where} num_codebooks")
        self.audio_channels = _int_in(
            decoder.get("audio_channels", 1), 1, 2, f"{where} audio_channels"
        )
        if self.num_codebooks % self.audio_channels:
            raise MobiusError(f"{where} {self.num_codebooks} codebooks over 2 channels")
        self.sampling_rate = _int_in(
            codec.get("sampling_rate"), 1000, 384000, f"{where} audio_encoder.sampling_rate"
        )
        generation = _read_json(self.package / "generation_config.json", required=False)
        start = generation.get("decoder_start_token_id", decoder.get("bos_token_id"))
        self.start_id = _int_in(start, 0, self.vocab_size, f"{where} decoder start id")
        self.generation = generation

    # -- settings -------------------------------------------------------------------

    def default_guidance_scale(self) -> float | None:
        """The generation config's ``guidance_scale`` (MusicGen: 3.0), or none."""
        scale = self.generation.get("guidance_scale")
        return None if scale is None else float(scale)

    def default_sampling(self) -> Sampling:
        """``do_sample``, ``temperature``, ``top_k`` and ``top_p`` of the generation config."""
        config = self.generation
        return Sampling(
            do_sample=bool(config.get("do_sample", False)),
            temperature=float(config.get("temperature", 1.0) or 1.0),
            top_k=int(config.get("top_k", 50) or 0),
            top_p=float(config.get("top_p", 1.0) or 1.0),
        )

    # -- generation -----------------------------------------------------------------

    def tokenize(self, texts: list[str]) -> dict[str, np.ndarray]:
        """``input_ids`` and ``attention_mask`` (int64, padded) of ``texts``."""
        encoded = self.tokenizer(texts, padding=True, return_tensors="np")
        return {
            "input_ids": np.asarray(encoded["input_ids"], np.int64),
            "attention_mask": np.asarray(encoded["attention_mask"], np.int64),
        }

    def read_melody(self, path) -> np.ndarray:
        """A melody clip from an audio file: MusicGen-Melody packages only."""
        raise MobiusError(
            f"{self.package} is a MusicGen package: only MusicGen-Melody takes a melody"
        )

    def _text_conditioning(self, feeds: dict, guidance_scale: float | None, melody=None) -> dict:
        """The decoder's ``encoder_attention_mask`` and cross caches; doubled for guidance."""
        if melody is not None:
            self.read_melody(None)  # refuses
        session = self.sessions["text_encoder"]
        names = [o.name for o in session.get_outputs()]
        outputs = dict(zip(names, session.run(None, feeds), strict=True))
        source = {"encoder_attention_mask": feeds["attention_mask"]}
        source.update(
            {
                name.replace("present.", "past_key_values."): value
                for name, value in outputs.items()
                if name.startswith("present.")
            }
        )
        if guided(guidance_scale):  # the empty prompt: no text at all
            source = {k: np.concatenate([v, np.zeros_like(v)]) for k, v in source.items()}
        return source

    def _step_source(self, source: dict, step: int) -> dict:
        """What the decoder reads of the text at ``step`` (1 first): the same at every step."""
        return source

    def _empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        cache = {}
        for value in self.sessions["decoder"].get_inputs():
            if value.name.startswith("past_key_values.") and ".decoder." in value.name:
                heads, head_dim = value.shape[1], value.shape[3]
                cache[value.name] = np.zeros((batch, heads, 0, head_dim), np.float32)
        return cache

    def generate_codes(
        self,
        texts: list[str],
        max_new_tokens: int,
        guidance_scale: float | None = None,
        sampling: Sampling | None = None,
        seed: int | None = None,
        melody: list[np.ndarray] | None = None,
    ) -> np.ndarray:
        """int64 ``[batch, codebooks, frames]``: the codes of each text, delay pattern undone.

        ``frames = max_new_tokens + 1 - codebooks / audio_channels``. ``melody`` (Melody
        packages): one mono clip per text at the feature extractor's rate.
        """
        per_channel = self.num_codebooks // self.audio_channels
        least = max(per_channel, 2 * per_channel - 2)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise MobiusError(f"--max-new-tokens {max_new_tokens!r} is not a count")
        if max_new_tokens < least:
            raise MobiusError(
                f"--max-new-tokens {max_new_tokens} is too few: the delay pattern of "
                f"{per_channel} codebooks needs at least {least} steps for one frame"
            )
        sampling = sampling or Sampling()
        rng = np.random.default_rng(seed)
        feeds = self.tokenize(texts)
        source = self._text_conditioning(feeds, guidance_scale, melody)
        batch = len(texts)
        doubled = 2 * batch if guided(guidance_scale) else batch
        length = max_new_tokens + 1
        writes = delay_pattern(self.num_codebooks, self.audio_channels, length)
        codes = np.full((batch, self.num_codebooks, length), self.start_id, np.int64)
        cache = self._empty_cache(doubled)
        decoder = self.sessions["decoder"]
        names = [o.name for o in decoder.get_outputs()]
        for step in range(1, length):  # the code at `step` from the codes before it
            ids = codes[:, :, step - 1 : step]
            if doubled != batch:
                ids = np.concatenate([ids, ids])
            feeds = {"input_ids": ids, **self._step_source(source, step), **cache}
            outputs = dict(zip(names, decoder.run(None, feeds), strict=True))
            cache = {
                name.replace("present.", "past_key_values."): value
                for name, value in outputs.items()
                if name.startswith("present.")
            }
            logits = outputs["logits"][:, :, -1]  # [doubled, codebooks, vocab]
            if doubled != batch:
                cond, uncond = logits[:batch], logits[batch:]
                logits = uncond + (cond - uncond) * np.float32(guidance_scale)
            picked = self._pick(logits, sampling, rng)
            codes[:, :, step] = np.where(writes[:, step], picked, self.start_id)
        # Undo the pattern: each codebook's written steps, in order, are its frames.
        return np.stack([codes[:, r, writes[r]] for r in range(self.num_codebooks)], axis=1)

    @staticmethod
    def _pick(logits: np.ndarray, sampling: Sampling, rng) -> np.ndarray:
        """``[batch, codebooks]`` codes from ``[batch, codebooks, vocab]`` logits."""
        if not sampling.do_sample or sampling.temperature == 0:
            return logits.argmax(-1)
        rows = logits.reshape(-1, logits.shape[-1])
        picked = [
            sample_next_token(
                row,
                rng,
                do_sample=True,
                temperature=sampling.temperature,
                top_k=sampling.top_k,
                top_p=sampling.top_p,
            )
            for row in rows
        ]
        return np.asarray(picked, np.int64).reshape(logits.shape[:2])

    def decode_audio(self, codes: np.ndarray) -> np.ndarray:
        """float32 ``[batch, audio_channels, samples]`` of ``codes``."""
        (audio,) = self.sessions["audio_decoder"].run(None, {"audio_codes": codes})
        return audio

    def generate(self, texts: list[str], max_new_tokens: int, **settings) -> np.ndarray:
        """float32 ``[batch, audio_channels, samples]``: the music of each text.

        ``settings`` are :meth:`generate_codes`'s ``guidance_scale``, ``sampling`` and ``seed``.
        """
        return self.decode_audio(self.generate_codes(texts, max_new_tokens, **settings))


class PrefixMusicGenerator(MusicGenerator):
    """The prefix form (MusicGen-Melody): the conditioning goes before the decoder's first step.

    A melody clip conditions on its chroma (:mod:`mobius_audio.melody_features`, the
    package's ``preprocessor_config.json``); a text alone on the "null" chroma (one
    frame of pitch class 0), as transformers does. The guidance batch's empty prompt
    is the null chroma with the text fully masked (zero states).
    """

    def _read_settings(self) -> None:
        super()._read_settings()
        config = _read_json(self.package / "config.json")
        self.num_chroma = _int_in(config.get("num_chroma"), 1, 128, "config.json: num_chroma")

    def read_melody(self, path) -> np.ndarray:
        """The audio file at ``path``: mono samples at the feature extractor's rate."""
        from mobius_audio.audio_file import read_audio
        from mobius_audio.melody_features import ChromaFeatureExtractor

        return read_audio(path, ChromaFeatureExtractor.from_package(self.package).sampling_rate)

    def chroma(self, clips: list[np.ndarray]) -> np.ndarray:
        """``input_features`` float32 [clips, frames, num_chroma] of mono clips."""
        from mobius_audio.melody_features import ChromaFeatureExtractor

        features = ChromaFeatureExtractor.from_package(self.package)(clips)
        if features.shape[-1] != self.num_chroma:
            raise MobiusError(
                f"{self.package}: the feature extractor's {features.shape[-1]} pitch classes "
                f"are not config.json's num_chroma {self.num_chroma}"
            )
        return features

    def _text_conditioning(self, feeds: dict, guidance_scale: float | None, melody=None) -> dict:
        batch = feeds["input_ids"].shape[0]
        if melody is not None and len(melody) != batch:
            raise MobiusError(f"{len(melody)} melody clips for {batch} texts: give one a text")
        if melody is None:
            chroma = np.zeros((batch, 1, self.num_chroma), np.float32)
        else:
            chroma = self.chroma(melody)
        null = np.zeros_like(chroma)
        null[:, :, 0] = 1  # pitch class 0 throughout: transformers' "no melody"
        chroma = null if melody is None else chroma
        feeds = {**feeds, "input_features": chroma}
        if guided(guidance_scale):
            doubled = {k: np.concatenate([v, v]) for k, v in feeds.items()}
            doubled["attention_mask"][batch:] = 0
            doubled["input_features"][batch:] = null
            feeds = doubled
        (conditioning,) = self.sessions["text_encoder"].run(["conditioning"], feeds)
        return {"conditioning": conditioning}

    def _step_source(self, source: dict, step: int) -> dict:
        """The conditioning at the first step; then it is in the cache (no rows)."""
        return source if step == 1 else {"conditioning": source["conditioning"][:, :0]}


def open_music_generator(package_dir, threads: int | None = None) -> MusicGenerator:
    """The generator of the package's form: cross-attention (MusicGen) or prefix (Melody)."""
    if not is_music_package(package_dir):
        return MusicGenerator(package_dir, threads)  # refuses it, naming what is missing

    decoder = read_graph(Path(package_dir) / "decoder" / "model.onnx")
    prefix = any(i.name == "conditioning" for i in decoder.graph.input)
    return (PrefixMusicGenerator if prefix else MusicGenerator)(package_dir, threads)


def sampling_from_options(model: MusicGenerator, options: dict) -> Sampling:
    """The generation config's sampling, with ``--do-sample`` / ``--temperature`` /
    ``--top-k`` / ``--top-p`` applied (any of them turns sampling on; temperature 0: greedy)."""
    sampling = model.default_sampling()
    given = {k: options.get(k) for k in ("temperature", "top_k", "top_p")}
    if options.get("do_sample") or any(v is not None for v in given.values()):
        sampling.do_sample = True
    for key, value in given.items():
        if value is not None:
            setattr(sampling, key, value)
    if sampling.temperature < 0:
        raise MobiusError(f"--temperature {sampling.temperature} is negative")
    return sampling


def run_cli(package_dir, prompt: str, options: dict) -> int:
    """``mobius generate PKG "text" [--output music.wav] [--seed N] [--guidance-scale G]
    [--max-new-tokens N] [--temperature T] [--top-k K] [--melody AUDIO]``: write the music
    of PROMPT (MusicGen-Melody: to the tune of AUDIO)."""
    model = open_music_generator(package_dir, threads=options.get("threads"))
    melody = [model.read_melody(options["melody"])] if options.get("melody") else None
    scale = options.get("guidance_scale")
    scale = model.default_guidance_scale() if scale is None else scale
    codes = model.generate_codes(
        [prompt],
        options.get("max_new_tokens", 128),
        guidance_scale=scale,
        sampling=sampling_from_options(model, options),
        seed=options.get("seed"),
        melody=melody,
    )
    audio = model.decode_audio(codes)[0]  # [channels, samples]
    output = options.get("output_file") or DEFAULT_OUTPUT
    write_wav(output, audio.T, model.sampling_rate)
    seconds = audio.shape[-1] / model.sampling_rate
    print(
        f"wrote {output}: {seconds:.2f} s at {model.sampling_rate} Hz "
        f"({codes.shape[-1]} frames of {codes.shape[1]} codebooks)",
        file=sys.stderr,
    )
    return 0
