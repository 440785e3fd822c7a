"""Speak text with a SpeechT5 text-to-speech package and its HiFi-GAN vocoder package.

The contract is :mod:`mobius_audio.tasks_speecht5_tts`. :class:`SpeechT5Speaker`
runs transformers' ``generate_speech`` loop in numpy: the encoder once, then the
decoder a step at a time from a zero frame, each step's last mel frame fed back,
until every row's stop probabilities sum to the threshold (after ``minlenratio``
steps per token, at most ``maxlenratio``); a row's spectrogram is the postnet over
the frames up to its stop. The prenet dropout, always on in SpeechT5, is drawn by
:func:`draw_dropout_masks` from one numpy generator seeded with ``--seed``.
:func:`run_cli` is the ``mobius generate`` runner.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import load_session, load_tokenizer
from mobius.source import read_json

STAGES = ("encoder", "decoder", "postnet")
DEFAULT_OUTPUT = "speech.wav"
THRESHOLD, MINLENRATIO, MAXLENRATIO = 0.5, 0.0, 20.0  # transformers' generate_speech defaults


def is_text_to_speech_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` holds the three graphs of the text-to-speech contract."""
    return all((Path(package) / stage / "model.onnx").is_file() for stage in STAGES)


def draw_dropout_masks(rng: np.random.Generator, layers: int, units: int, p: float) -> np.ndarray:
    """One step's prenet dropout masks ``[layers, 1, units]``: 1 with probability ``p``.

    transformers draws ``torch.bernoulli(x, p=p)`` and keeps the units where it is
    1 (so ``p`` is, oddly, the keep probability), dividing them by ``1 - p``.
    """
    return (rng.random((layers, 1, units)) < p).astype(np.float32)


def load_speaker_embedding(path: str | os.PathLike, dim: int) -> np.ndarray:
    """The x-vector in the ``.npy`` file ``path``: float32 ``[dim]`` (or ``[1, dim]``), finite."""
    path = Path(path)
    if not path.is_file():
        raise MobiusError(f"no such file: {path}")
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise MobiusError(f"cannot read {path} as a numpy .npy array: {exc}") from None
    if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
        raise MobiusError(f"{path}: a speaker embedding is a float array, not {array.dtype}")
    if array.shape not in ((dim,), (1, dim)):
        raise MobiusError(
            f"{path}: the speaker embedding must have shape [{dim}], not {list(array.shape)}"
        )
    if not np.isfinite(array).all() or not np.abs(array).any():
        raise MobiusError(f"{path}: the speaker embedding is zero or not finite")
    return array.reshape(dim).astype(np.float32)


def _positive(config: dict, name: str, package: Path, kind=int):
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        raise MobiusError(
            f"{package / 'config.json'}: {name} {value!r} is not a positive {kind.__name__}"
        )
    return value


@dataclass
class StopRule:
    """When a row's spectrogram ends: ``generate_speech``'s ``threshold``, ``minlenratio``,
    ``maxlenratio`` (steps per input token)."""

    threshold: float = THRESHOLD
    minlenratio: float = MINLENRATIO
    maxlenratio: float = MAXLENRATIO

    def check(self) -> None:
        if not (0 <= self.minlenratio <= self.maxlenratio and np.isfinite(self.maxlenratio)):
            raise MobiusError(
                f"--min-length-ratio {self.minlenratio} and --max-length-ratio "
                f"{self.maxlenratio} must satisfy 0 <= min <= max"
            )
        if not np.isfinite(self.threshold):
            raise MobiusError(f"--stop-threshold {self.threshold} is not a number")


class SpeechT5Speaker:
    """A text-to-speech package (and optionally its vocoder) in ONNX Runtime."""

    def __init__(
        self,
        package_dir: str | os.PathLike,
        vocoder_dir: str | os.PathLike | None = None,
        threads: int | None = None,
    ) -> None:
        import onnxruntime as ort

        self.package = Path(package_dir)
        if not is_text_to_speech_package(self.package):
            raise MobiusError(
                f"{self.package} is not a text-to-speech package (encoder/, decoder/ and "
                "postnet/model.onnx)"
            )
        self._options = ort.SessionOptions()
        if threads:
            self._options.intra_op_num_threads = threads
        self.sessions = {
            stage: self._session(self.package / stage / "model.onnx") for stage in STAGES
        }
        config = read_json(self.package / "config.json")
        dropout = config.get("speech_decoder_prenet_dropout", 0.5)
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, (int, float))
            or not 0 <= dropout < 1
        ):
            raise MobiusError(
                f"{self.package}: speech_decoder_prenet_dropout {dropout!r} is not in [0, 1)"
            )
        self.dropout = float(dropout)
        self.max_speech_positions = _positive(config, "max_speech_positions", self.package)
        self.max_text_positions = _positive(config, "max_text_positions", self.package)
        decoder = {i.name: i.shape for i in self.sessions["decoder"].get_inputs()}
        self.prenet_layers, _, self.prenet_units = decoder["prenet_dropout_mask"]
        self.num_mel_bins = decoder["decoder_input_values"][2]
        self.speaker_embedding_dim = decoder["speaker_embeddings"][1]
        _, self.heads, _, self.head_dim = decoder["past_key_values.0.decoder.key"]
        self.layers = sum(name.endswith(".decoder.key") for name in decoder)
        outputs = {o.name: o.shape for o in self.sessions["decoder"].get_outputs()}
        self.reduction_factor = outputs["stop_probabilities"][2]
        self._tokenizer = None
        self._vocoder = None
        self.vocoder_dir = Path(vocoder_dir) if vocoder_dir else self.package / "vocoder"

    def _session(self, path: Path):
        return load_session(path, self._options)

    @property
    def tokenizer(self):
        """The package's SpeechT5 tokenizer (sentencepiece), loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.package)
        return self._tokenizer

    def tokenize(self, texts: list[str]) -> dict[str, np.ndarray]:
        """``input_ids`` and ``attention_mask`` (int64, right-padded) of ``texts``."""
        encoded = self.tokenizer(texts, padding=True, return_tensors="np")
        ids = np.asarray(encoded["input_ids"], np.int64)
        if ids.shape[1] > self.max_text_positions:
            raise MobiusError(
                f"the text is {ids.shape[1]} tokens long; the model reads at most "
                f"{self.max_text_positions} (max_text_positions): split it"
            )
        return {"input_ids": ids, "attention_mask": np.asarray(encoded["attention_mask"], np.int64)}

    def spectrograms(
        self,
        feeds: dict[str, np.ndarray],
        speaker_embeddings: np.ndarray,
        rng: np.random.Generator,
        stop: StopRule | None = None,
    ) -> list[np.ndarray]:
        """Each row's log-mel spectrogram ``[frames, num_mel_bins]``, as ``generate_speech`` makes it.

        ``speaker_embeddings`` is ``[batch, dim]`` (or ``[1, dim]`` for every row).
        Past ``max_speech_positions`` steps (where transformers' position table ends)
        every unfinished row stops.
        """
        stop = stop or StopRule()
        stop.check()
        ids = feeds["input_ids"]
        batch = ids.shape[0]
        speaker = np.broadcast_to(speaker_embeddings, (batch, self.speaker_embedding_dim))
        encoder = self.sessions["encoder"]
        names = [o.name for o in encoder.get_outputs()]
        encoded = dict(zip(names, encoder.run(None, feeds), strict=True))
        text_length = encoded["last_hidden_state"].shape[1]
        maxlen = int(text_length * stop.maxlenratio / self.reduction_factor)
        minlen = int(text_length * stop.minlenratio / self.reduction_factor)
        maxlen = min(maxlen, self.max_speech_positions)
        empty = np.zeros((batch, self.heads, 0, self.head_dim), np.float32)
        step_feeds = {
            "speaker_embeddings": np.ascontiguousarray(speaker, np.float32),
            "encoder_attention_mask": feeds["attention_mask"],
            **{k.replace("present.", "past_key_values."): v for k, v in encoded.items() if k.startswith("present.")},
            **{f"past_key_values.{i}.decoder.{part}": empty for i in range(self.layers) for part in ("key", "value")},
        }  # fmt: skip
        frame = np.zeros((batch, 1, self.num_mel_bins), np.float32)
        decoder = self.sessions["decoder"]
        out_names = [o.name for o in decoder.get_outputs()]
        spectra, finished, step = [], {}, 0
        while len(finished) < batch:
            step += 1
            masks = draw_dropout_masks(rng, self.prenet_layers, self.prenet_units, self.dropout)
            step_feeds.update(decoder_input_values=frame, prenet_dropout_mask=masks)
            outputs = dict(zip(out_names, decoder.run(None, step_feeds), strict=True))
            for name, value in outputs.items():
                if name.startswith("present."):
                    step_feeds[name.replace("present.", "past_key_values.")] = value
            spectra.append(outputs["spectrum"])
            frame = outputs["spectrum"][:, -1:, :]
            if step < minlen:
                continue
            if step < maxlen:
                probabilities = outputs["stop_probabilities"][:, -1, :]
                meeting = np.flatnonzero(probabilities.sum(-1) >= stop.threshold)
            else:
                meeting = range(batch)
            new = [int(i) for i in meeting if int(i) not in finished]
            if new:
                (postnet,) = self.sessions["postnet"].run(
                    None, {"raw_spectrogram": np.concatenate(spectra, axis=1)}
                )
                finished.update({i: postnet[i] for i in new})
        return [finished[i] for i in range(batch)]

    def vocoder(self):
        """The vocoder's session and sample rate (Hz), from :attr:`vocoder_dir` (opened once)."""
        if self._vocoder is None:
            self._vocoder = self._open_vocoder()
        return self._vocoder

    def _open_vocoder(self):
        graph = self.vocoder_dir / "model.onnx"
        if not graph.is_file():
            raise MobiusError(
                f"no vocoder in {self.vocoder_dir}: build one there (mobius build --model "
                f"microsoft/speecht5_hifigan {self.vocoder_dir}) or pass --vocoder DIR"
            )
        session = self._session(graph)
        inputs = {i.name: i.shape for i in session.get_inputs()}
        if list(inputs) != ["spectrogram"] or inputs["spectrogram"][2] != self.num_mel_bins:
            raise MobiusError(
                f"{self.vocoder_dir} is not a spectrogram-vocoder package of "
                f"{self.num_mel_bins} mel bins (model.onnx taking spectrogram)"
            )
        config = read_json(self.vocoder_dir / "config.json")
        rate = config.get("sampling_rate", 16000)
        if isinstance(rate, bool) or not isinstance(rate, int) or not 1000 <= rate <= 384000:
            raise MobiusError(
                f"{self.vocoder_dir / 'config.json'}: sampling_rate {rate!r} is not a rate in Hz"
            )
        return session, rate

    def waveforms(self, spectrograms: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
        """Each spectrogram's waveform (float32, cut at its length) and the sample rate.

        The batch is zero-padded to its longest spectrogram and vocoded at once, as
        ``generate_speech(..., return_output_lengths=True)`` does.
        """
        session, rate = self.vocoder()
        frames = max(len(s) for s in spectrograms)
        padded = np.zeros((len(spectrograms), frames, self.num_mel_bins), np.float32)
        for row, spectrogram in enumerate(spectrograms):
            padded[row, : len(spectrogram)] = spectrogram
        (waveform,) = session.run(None, {"spectrogram": padded})
        per_frame = waveform.shape[1] // frames
        return [
            wave[: per_frame * len(s)] for wave, s in zip(waveform, spectrograms, strict=True)
        ], rate

    def speak(
        self,
        texts: list[str],
        speaker_embedding: np.ndarray,
        seed: int | None = None,
        stop: StopRule | None = None,
    ) -> tuple[list[np.ndarray], int]:
        """The waveform of each text (float32 in [-1, 1]) and the sample rate."""
        feeds = self.tokenize(texts)
        speaker = np.asarray(speaker_embedding, np.float32).reshape(-1, self.speaker_embedding_dim)
        spectrograms = self.spectrograms(feeds, speaker, np.random.default_rng(seed), stop)
        return self.waveforms(spectrograms)


def run_cli(package_dir, prompt: str, options: dict) -> int:
    """``mobius generate PKG "text" --speaker-embedding x.npy [--vocoder DIR] [--seed N]
    [--output out.wav] [--stop-threshold P] [--min-length-ratio R] [--max-length-ratio R]``."""
    from mobius_audio.tts import write_wav

    speaker = SpeechT5Speaker(package_dir, options.get("speecht5_vocoder"), options.get("threads"))
    path = options.get("speaker_embedding")
    if not path:
        raise MobiusError(
            "SpeechT5 speaks in the voice of an x-vector: pass --speaker-embedding FILE.npy "
            f"(float32 [{speaker.speaker_embedding_dim}])"
        )
    embedding = load_speaker_embedding(path, speaker.speaker_embedding_dim)
    rule = StopRule()
    for field, dest in (("threshold", "speecht5_threshold"), ("minlenratio", "speecht5_minlenratio"),
                        ("maxlenratio", "speecht5_maxlenratio")):  # fmt: skip
        if options.get(dest) is not None:
            setattr(rule, field, float(options[dest]))
    speaker.vocoder()  # a missing vocoder fails before the spectrogram is made
    (waveform,), rate = speaker.speak([prompt], embedding, options.get("seed"), rule)
    output = options.get("output_file") or DEFAULT_OUTPUT
    write_wav(output, waveform, rate)
    print(f"wrote {output}: {len(waveform) / rate:.2f} s at {rate} Hz", file=sys.stderr)
    return 0
