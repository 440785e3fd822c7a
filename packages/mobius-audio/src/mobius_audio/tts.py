"""Speak text with a text-to-audio package (:mod:`mobius_audio.tasks_tts`: VITS / MMS-TTS).

The package's ``VitsTokenizer`` (pure Python: characters, interspersed with the
blank id) spells the text; ``text_encoder/`` predicts the frames, ``vocoder/``
makes the waveform. The graphs' noise inputs are drawn from a standard normal by
one numpy generator seeded with ``seed``: the duration noise first, then the
prior noise, in the order transformers draws them. :func:`synthesize` is the
Python API; :func:`run_cli` is the ``mobius generate`` runner of the packages
:func:`is_text_to_audio_package` accepts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import load_session

STAGES = ("text_encoder", "vocoder")
DEFAULT_OUTPUT = "speech.wav"


def is_text_to_audio_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` holds the two graphs of the text-to-audio contract."""
    return all((Path(package) / stage / "model.onnx").is_file() for stage in STAGES)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MobiusError(f"{path} is not a JSON object")
    return data


def sampling_rate(config: dict, package: Path) -> int:
    """The config's ``sampling_rate`` (Hz), checked."""
    rate = config.get("sampling_rate", 16000)
    if not isinstance(rate, int) or isinstance(rate, bool) or not 1000 <= rate <= 384000:
        raise MobiusError(f"{package / 'config.json'}: sampling_rate {rate!r} is not a rate in Hz")
    return rate


def load_tokenizer(package: Path):
    """The package's ``VitsTokenizer``; refuses the settings that need an external tool."""
    settings = _read_json(package / "tokenizer_config.json")
    if not (package / "vocab.json").is_file():
        raise MobiusError(
            f"{package} has no vocab.json: build from a checkpoint with its tokenizer"
        )
    if settings.get("phonemize"):
        raise MobiusError(
            f"{package}: the tokenizer phonemizes (espeak through phonemizer), which mobius does "
            "not run; pass phonemes yourself to a package built with phonemize=false"
        )
    from transformers import VitsTokenizer

    return VitsTokenizer.from_pretrained(str(package), trust_remote_code=False)


def tokenize(tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64, right-padded) of ``texts``."""
    if tokenizer.is_uroman and any(not t.isascii() for t in texts):
        raise MobiusError(
            "the text is not in Latin letters and this tokenizer wants it romanised with "
            "uroman first (pip install uroman, then romanise the text)"
        )
    encoded = tokenizer(texts, padding=True, return_tensors="np")
    ids = np.asarray(encoded["input_ids"], np.int64)
    mask = np.asarray(encoded["attention_mask"], np.int64)
    empty = [t for t, row in zip(texts, mask, strict=True) if not row.any()]
    if empty:
        raise MobiusError(f"no character of {empty[0]!r} is in the tokenizer's vocabulary")
    return {"input_ids": ids, "attention_mask": mask}


def open_sessions(package: Path, graphs, threads: int | None = None) -> dict:
    """An ONNX Runtime CPU session of each ``graphs`` entry's ``model.onnx`` in ``package``, by name."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return {graph: load_session(package / graph / "model.onnx", options) for graph in graphs}


class TextToAudio:
    """A text-to-audio package in ONNX Runtime: its two sessions, tokenizer and sample rate."""

    def __init__(self, package_dir: str | os.PathLike, threads: int | None = None) -> None:
        self.package = Path(package_dir)
        if not is_text_to_audio_package(self.package):
            raise MobiusError(
                f"{self.package} is not a text-to-audio package (text_encoder/model.onnx and "
                "vocoder/model.onnx)"
            )
        self.sessions = open_sessions(self.package, STAGES, threads)
        config = _read_json(self.package / "config.json")
        self.sampling_rate = sampling_rate(config, self.package)
        self.num_speakers = config.get("num_speakers", 1)
        if not isinstance(self.num_speakers, int) or self.num_speakers < 1:
            raise MobiusError(f"{self.package}: num_speakers {self.num_speakers!r} is not a count")
        self.tokenizer = load_tokenizer(self.package)

    def run(self, feeds: dict[str, np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        """Waveforms (float32, each cut at its length) of tokenised ``feeds``, noise from ``rng``."""
        waveform, lengths = self.run_batch(feeds, rng)
        return [wave[:length] for wave, length in zip(waveform, lengths, strict=True)]

    def run_batch(self, feeds: dict[str, np.ndarray], rng) -> tuple[np.ndarray, np.ndarray]:
        """The padded ``waveform [batch, samples]`` and ``waveform_lengths [batch]``.

        ``rng`` has numpy's ``standard_normal(shape)``: the duration noise (where the
        graph takes it) is drawn first, then the prior noise.
        """
        ids = feeds["input_ids"]
        encoder = self.sessions["text_encoder"]
        feeds = dict(feeds)
        if "duration_noise" in {i.name for i in encoder.get_inputs()}:  # a stochastic predictor
            shape = (ids.shape[0], 2, ids.shape[1])
            feeds["duration_noise"] = rng.standard_normal(shape).astype(np.float32)
        names = [o.name for o in encoder.get_outputs()]
        outputs = encoder.run(None, feeds)
        prior = dict(zip(names, outputs, strict=True))
        lengths = prior.pop("waveform_lengths")
        noise = rng.standard_normal(prior["prior_means"].shape).astype(np.float32)
        speaker = {k: v for k, v in feeds.items() if k == "speaker_id"}
        vocoder_feeds = {**prior, "prior_noise": noise, **speaker}
        (waveform,) = self.sessions["vocoder"].run(None, vocoder_feeds)
        return waveform, lengths

    def speaker_feeds(self, speaker: int | None, batch: int) -> dict[str, np.ndarray]:
        """``speaker_id`` for a multi-speaker package (default speaker 0), checked; else nothing."""
        if self.num_speakers <= 1:
            if speaker not in (None, 0):
                raise MobiusError(f"{self.package} has one speaker; --speaker {speaker} is not one")
            return {}
        speaker = 0 if speaker is None else speaker
        if not 0 <= speaker < self.num_speakers:
            raise MobiusError(
                f"--speaker {speaker} is not one of the package's {self.num_speakers} speakers "
                f"(0 to {self.num_speakers - 1})"
            )
        return {"speaker_id": np.full(batch, speaker, np.int64)}

    def speak(
        self, texts: list[str], seed: int | None = None, speaker: int | None = None
    ) -> list[np.ndarray]:
        """The waveform of each text (float32 in [-1, 1] at :attr:`sampling_rate`)."""
        feeds = tokenize(self.tokenizer, texts)
        feeds.update(self.speaker_feeds(speaker, len(texts)))
        return self.run(feeds, np.random.default_rng(seed))


def synthesize(
    package_dir,
    text: str,
    seed: int | None = None,
    speaker: int | None = None,
    threads: int | None = None,
):
    """``(waveform, sampling_rate)`` of ``text`` spoken by the package in ``package_dir``."""
    model = TextToAudio(package_dir, threads=threads)
    return model.speak([text], seed, speaker)[0], model.sampling_rate


def write_wav(path: str | os.PathLike, waveform: np.ndarray, rate: int) -> None:
    """A 32-bit float WAV of ``waveform``."""
    try:
        import soundfile
    except ImportError:
        raise MobiusError("writing WAV needs soundfile: pip install mobius-audio[run]") from None
    try:
        soundfile.write(str(path), waveform, rate, subtype="FLOAT", format="WAV")
    except (OSError, RuntimeError) as exc:
        raise MobiusError(f"cannot write {path}: {exc}") from None


def run_cli(package_dir, prompt: str, options: dict) -> int:
    """``mobius generate PKG "text" [--output out.wav] [--seed N] [--speaker ID]``: speak PROMPT.

    ``--output`` is core's ``generate`` option (dest ``output_file``); without it the file
    is ``speech.wav``.
    """
    output = options.get("output_file") or DEFAULT_OUTPUT
    waveform, rate = synthesize(
        package_dir,
        prompt,
        seed=options.get("seed"),
        speaker=options.get("speaker"),
        threads=options.get("threads"),
    )
    write_wav(output, waveform, rate)
    print(f"wrote {output}: {len(waveform) / rate:.2f} s at {rate} Hz", file=sys.stderr)
    return 0
