"""Transcribe audio with a transducer package (:mod:`mobius_audio.tasks_transducer`: Parakeet RNN-T, TDT).

Greedy decoding as transformers' ``ParakeetForRNNT.generate`` / ``ParakeetForTDT.generate``
does it, per clip: the prediction network starts from the decoder start token (the
generation config's ``decoder_start_token_id``, else the blank) and a zero LSTM state;
at each step the joint scores the current encoder frame against the prediction
network's output and the likeliest token is emitted.

- RNN-T: a blank moves to the next frame; another token is fed back to the prediction
  network and the frame stays, unless it is the ``max_symbols_per_step``-th token in a
  row at that frame, which moves on too.
- TDT: the frame moves by the likeliest of ``durations`` (at least one frame after a
  blank); a token other than the blank is fed back to the prediction network.
  (transformers moves by the likeliest duration logit's index: the same for the
  checkpoints' durations 0, 1, 2, 3, 4.)

A clip ends when its frame passes its last real encoder frame, or after
``max_symbols_per_step * encoder_frames - 1`` tokens (transformers' ``max_length``
for the clip alone). The text is the emitted tokens without the blanks, decoded by
the package's tokenizer. A batch decodes each clip as it would alone (transformers'
batched ``generate`` lets a clip that has ended keep emitting until the longest ends).

Example::

    from mobius_audio.transducer import Transducer

    print(Transducer("parakeet-tdt-out/").transcribe(["speech.wav"])[0])

Needs ONNX Runtime and soundfile: ``pip install mobius-audio[run]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import (
    ORT_FLOAT_TYPES,
    PackageError,
    _read_json,
    _refuse_plugin_options,
    load_tokenizer,
    refuse_output_file,
)
from mobius_audio.audio_file import read_audio

STAGES = ("encoder", "decoder", "joint")


def is_transducer_package(package_dir: str | os.PathLike) -> bool:
    """Whether ``package_dir`` holds the three graphs of the transducer contract."""
    return all((Path(package_dir) / stage / "model.onnx").is_file() for stage in STAGES)


def _count(values: dict, name: str, where: str, low: int = 0, default=None) -> int:
    """``values[name]`` checked to be an integer >= ``low`` (a stranger's file)."""
    value = values.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < 1 << 31:
        raise PackageError(f"{where}'s {name} {value!r} is not an integer >= {low}")
    return value


@dataclass(frozen=True)
class DecodingSettings:
    """What greedy decoding reads from ``config.json`` and ``generation_config.json``."""

    vocab_size: int
    blank_token_id: int
    start_token_id: int
    max_symbols_per_step: int
    durations: tuple[int, ...]  # TDT's frames per duration logit; empty for RNN-T
    subsampling: tuple[int, int, int]  # the encoder's conv (kernel, stride, layers)

    @classmethod
    def from_package(cls, package: Path) -> DecodingSettings:
        config = _read_json(package / "config.json")
        where = "config.json"
        vocab = _count(config, "vocab_size", where, 1)
        blank = _count(config, "blank_token_id", where)
        if blank >= vocab:
            raise PackageError(
                f"config.json's blank_token_id {blank} is not below vocab_size {vocab}"
            )
        durations = config.get("durations", [])
        if config.get("model_type") != "parakeet_tdt":
            durations = []
        elif (
            not isinstance(durations, list)
            or not durations
            or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 16
                for d in durations
            )
        ):
            raise PackageError(f"config.json's durations {durations!r} are not frame counts")
        generation = {}
        if (package / "generation_config.json").is_file():
            generation = _read_json(package / "generation_config.json")
        start = _count(generation, "decoder_start_token_id", "generation_config.json", 0, blank)
        if start >= vocab:
            raise PackageError(f"decoder_start_token_id {start} is not below vocab_size {vocab}")
        encoder = config.get("encoder_config")
        if not isinstance(encoder, dict):
            raise PackageError("config.json has no encoder_config object")
        factor = _count(encoder, "subsampling_factor", "encoder_config", 1, 8)
        if factor & (factor - 1):
            raise PackageError(f"encoder_config's subsampling_factor {factor} is not a power of 2")
        kernel = _count(encoder, "subsampling_conv_kernel_size", "encoder_config", 1, 3)
        stride = _count(encoder, "subsampling_conv_stride", "encoder_config", 1, 2)
        return cls(
            vocab_size=vocab,
            blank_token_id=blank,
            start_token_id=start,
            max_symbols_per_step=_count(config, "max_symbols_per_step", where, 1, 10),
            durations=tuple(durations),
            subsampling=(kernel, stride, factor.bit_length() - 1),
        )

    def encoder_frames(self, frames: np.ndarray) -> np.ndarray:
        """What the encoder's strided convs make of ``frames`` feature frames (transformers' formula)."""
        kernel, stride, layers = self.subsampling
        for _ in range(layers):
            frames = (frames + (kernel - 1) // 2 * 2 - kernel) // stride + 1
        return frames


class Transducer:
    """A transducer package in ONNX Runtime with its feature extractor and tokenizer."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        from mobius_audio.encoders import numpy_feature_extractor

        self.package = Path(package_dir)
        if not is_transducer_package(self.package):
            raise PackageError(
                f"{self.package} is not a transducer package (encoder/, decoder/ and joint/ "
                "model.onnx)"
            )
        self.settings = DecodingSettings.from_package(self.package)
        if not (self.package / "preprocessor_config.json").is_file():
            raise PackageError(
                f"no preprocessor_config.json in {self.package}: build from a checkpoint that "
                "has its feature extractor"
            )
        self.feature_extractor = numpy_feature_extractor(self.package)
        if self.feature_extractor is None:
            raise PackageError(
                f"{self.package}'s preprocessor_config.json is not a ParakeetFeatureExtractor's"
            )
        self.sessions = {s: open_session(self.package / s / "model.onnx", threads) for s in STAGES}
        source = self.sessions["encoder"].get_inputs()[0]
        self.float_type = ORT_FLOAT_TYPES.get(source.type)  # float32, or float16 built
        if source.name != "input_features" or self.float_type is None:
            raise PackageError(
                f"{self.package}'s encoder takes {source.name} ({source.type}), not float "
                "input_features"
            )
        self._tokenizer = None

    @property
    def tokenizer(self):
        """The package's tokenizer, loaded on first use."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.package)
        return self._tokenizer

    def features(self, clips: list) -> dict[str, np.ndarray]:
        """The encoder's feeds of ``clips`` (files, or mono samples at 16 kHz), padded to the longest."""
        rate = self.feature_extractor.sampling_rate
        waves = [read_audio(c, rate) if isinstance(c, (str, os.PathLike)) else c for c in clips]
        feeds = self.feature_extractor(waves, sampling_rate=rate)
        feeds["input_features"] = feeds["input_features"].astype(self.float_type)
        return feeds

    def transcribe_ids(self, clips: list) -> list[list[int]]:
        """Each clip's emitted tokens, blanks included, as transformers' ``generate`` returns
        them for the clip alone (without the decoder start token)."""
        feeds = self.features(clips)
        states, lengths = self.sessions["encoder"].run(None, feeds)
        # transformers bounds a clip's steps by its frames alone: the extractor's real
        # frames and one more (its centred STFT), through the encoder's subsampling.
        alone = self.settings.encoder_frames(feeds["attention_mask"].sum(1) + 1)
        return self.decode(states, lengths, self.settings.max_symbols_per_step * alone - 1)

    def transcribe(self, clips: list) -> list[str]:
        """The text of each clip (an audio file, or mono samples at 16 kHz)."""
        from mobius_audio.encoders import GROUPING_TOKENIZERS

        # A transducer emits each token once: a CTC tokenizer must not collapse repeats.
        keep_repeats = type(self.tokenizer).__name__ in GROUPING_TOKENIZERS
        options = {"group_tokens": False} if keep_repeats else {}
        texts = []
        for ids in self.transcribe_ids(clips):
            tokens = [t for t in ids if t != self.settings.blank_token_id]
            texts.append(self.tokenizer.decode(tokens, skip_special_tokens=True, **options))
        return texts

    def decode(
        self, states: np.ndarray, lengths: np.ndarray, limits: np.ndarray
    ) -> list[list[int]]:
        """Greedy decoding of ``encoder_hidden_states`` (see the module docstring)."""
        settings = self.settings
        batch, frames = states.shape[:2]
        frame = np.zeros(batch, np.int64)
        symbols = np.zeros(batch, np.int64)  # RNN-T: tokens emitted in a row at this frame
        emitted: list[list[int]] = [[] for _ in range(batch)]
        layers = self.sessions["decoder"].get_inputs()[1].shape[0]  # fixed in the graph
        zeros = np.zeros((layers, batch, states.shape[2]), states.dtype)
        start = np.full(batch, settings.start_token_id, np.int64)
        output, hidden, cell = self.step_decoder(start, zeros, zeros)
        active = (lengths > 0) & (limits > 0)
        while active.any():
            rows = np.flatnonzero(active)
            at = np.minimum(frame[rows], frames - 1)
            logits = self.sessions["joint"].run(
                None,
                {
                    "encoder_hidden_states": states[rows, at],
                    "decoder_hidden_states": output[rows],
                },
            )
            tokens = logits[0].argmax(-1)
            blank = tokens == settings.blank_token_id
            frame[rows] += self.frame_steps(blank, logits[1:], symbols, rows)
            for row, token in zip(rows, tokens.tolist(), strict=True):
                emitted[row].append(token)
            steps = np.array([len(e) for e in emitted])
            active = (frame < lengths) & (steps < limits)
            feed = rows[~blank & active[rows]]  # their token goes into the prediction network
            if len(feed):
                ids = tokens[~blank & active[rows]].astype(np.int64)
                out, h, c = self.step_decoder(ids, hidden[:, feed], cell[:, feed])
                output[feed], hidden[:, feed], cell[:, feed] = out, h, c
        return emitted

    def frame_steps(self, blank, duration_logits, symbols, rows) -> np.ndarray:
        """How far each of ``rows`` moves after emitting a blank or not (``symbols``: RNN-T's
        count of tokens in a row at the frame, updated in place)."""
        settings = self.settings
        if settings.durations:  # TDT
            step = np.asarray(settings.durations)[duration_logits[0].argmax(-1)]
            return np.where(blank & (step == 0), 1, step)
        count = np.where(blank, 0, symbols[rows] + 1)
        moves = blank | (count >= settings.max_symbols_per_step)
        symbols[rows] = np.where(moves, 0, count)
        return moves.astype(np.int64)

    def step_decoder(self, token_ids, hidden_state, cell_state):
        """One step of the prediction network: ``(output, hidden_state, cell_state)``."""
        return self.sessions["decoder"].run(
            None,
            {
                "token_ids": token_ids,
                "past_hidden_state": hidden_state,
                "past_cell_state": cell_state,
            },
        )


def transcribe(package_dir: str | os.PathLike, audio, *, threads: int | None = None) -> str:
    """The text of ``audio`` (a file, or mono samples at 16 kHz) by a transducer package."""
    return Transducer(package_dir, threads=threads).transcribe([audio])[0]


#: Options of ``mobius generate`` that do not apply: decoding is greedy.
_REFUSED = {
    "--do-sample": "do_sample",
    "--temperature": "temperature",
    "--top-k": "top_k",
    "--top-p": "top_p",
    "--system": "system",
}


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """``mobius generate PKG speech.wav``: print the transcription (``--max-new-tokens`` is not
    read: a clip ends with its frames, as in transformers)."""
    _refuse_plugin_options(package_dir, options)
    refuse_output_file(package_dir, options)
    refused = [flag for flag, dest in _REFUSED.items() if options.get(dest)]
    if refused:
        raise MobiusError(f"{', '.join(refused)}: a transducer package transcribes greedily")
    print(transcribe(package_dir, prompt, threads=options.get("threads")))
    return 0
