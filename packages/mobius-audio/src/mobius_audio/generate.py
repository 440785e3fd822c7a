"""Transcribe a WAV file with a speech-to-text package (:mod:`mobius_audio.tasks`).

The WAV is read with the standard library's ``wave`` (8/16/24/32-bit PCM, channels
averaged to mono) and, when its rate differs from the feature extractor's, resampled
by linear interpolation. The package's own feature extractor
(``preprocessor_config.json``, e.g. ``WhisperFeatureExtractor``) makes the log-mel
features on its numpy path; the encoder runs once and the decoder steps greedily
(or samples) from the prompt transformers' Whisper ``generate`` would start from:
``decoder_start_token_id``, the language (from the generation config, else detected
as the likeliest language token), the task and ``<|notimestamps|>``. ``suppress_tokens``
are never generated and ``begin_suppress_tokens`` not as the first new token. The
tokens come from core's :func:`mobius.generate.decode_loop`.

:func:`run_cli` is mobius-audio's ``mobius generate`` runner, for the packages
:func:`is_speech_package` accepts.
"""

from __future__ import annotations

import importlib
import os
import time
import wave
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import (
    ORT_FLOAT_TYPES,
    GenerationStats,
    PackageError,
    Seq2SeqGenerator,
    TextStream,
    begin_suppress_tokens,
    force_token,
    stream_to_stdout,
    suppress_tokens,
)

_PCM = {1: np.uint8, 2: np.int16, 4: np.int32}


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``(samples, rate)``: a PCM WAV file as float32 mono in [-1, 1]."""
    try:
        with wave.open(str(path), "rb") as wav:
            rate, width, channels = wav.getframerate(), wav.getsampwidth(), wav.getnchannels()
            frames = wav.readframes(wav.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise MobiusError(f"cannot read {path} as a PCM WAV file: {exc}") from None
    raw = np.frombuffer(frames, np.uint8)
    if width == 3:  # 24-bit: widen each little-endian sample to int32
        raw = raw.reshape(-1, 3)
        samples = (raw[:, 0].astype(np.int32) | raw[:, 1].astype(np.int32) << 8) | (
            raw[:, 2].astype(np.int8).astype(np.int32) << 16
        )
        scale = float(1 << 23)
    elif width in _PCM:
        samples = np.frombuffer(frames, _PCM[width]).astype(np.float64)
        if width == 1:  # unsigned, centred on 128
            samples = samples - 128.0
        scale = float(1 << (8 * width - 1))
    else:
        raise MobiusError(f"{path}: {8 * width}-bit samples are not PCM that mobius reads")
    audio = (np.asarray(samples, np.float64) / scale).reshape(-1, channels).mean(axis=1)
    return audio.astype(np.float32), rate


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``audio`` at ``target`` Hz by linear interpolation (no anti-alias filter: a simple resampler)."""
    if rate == target or audio.size == 0:
        return audio
    count = int(round(audio.size * target / rate))
    times = np.arange(count) * (rate / target)
    return np.interp(times, np.arange(audio.size), audio).astype(np.float32)


def extract_features(feature_extractor, waves, sampling_rate: int) -> np.ndarray:
    """``input_features`` of ``waves`` (one array or a list) from the extractor's numpy path.

    transformers' Whisper extractor switches to torch whenever torch is importable;
    mobius runs without torch, so it asks for the numpy path in either case.
    """
    return extract_inputs(feature_extractor, waves, sampling_rate)["input_features"]


def extract_inputs(
    feature_extractor, waves, sampling_rate: int, name: str = "input_features", mask: bool = False
) -> dict[str, np.ndarray]:
    """The encoder's feeds of ``waves``: ``name`` (float32) and, with ``mask``, ``attention_mask``.

    With ``mask`` a batch is padded to its longest clip (1 real, 0 padding, int64);
    without it the extractor pads as it likes (Whisper: to its 30 s window).
    """
    module = importlib.import_module(type(feature_extractor).__module__)
    probe = getattr(module, "is_torch_available", None)
    if probe is not None:
        module.is_torch_available = lambda: False
    options = dict(padding=True, return_attention_mask=True) if mask else {}
    try:
        out = feature_extractor(waves, sampling_rate=sampling_rate, return_tensors="np", **options)
    finally:
        if probe is not None:
            module.is_torch_available = probe
    feeds = {name: np.asarray(out[name], np.float32)}
    if mask:
        feeds["attention_mask"] = np.asarray(out["attention_mask"], np.int64)
    return feeds


def _language_token(language: str, lang_to_id: dict) -> str:
    """``"<|de|>"`` for ``"<|de|>"``, ``"de"`` or ``"german"``, as transformers' Whisper reads them."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    language = language.lower()
    if language in lang_to_id:
        return language
    return f"<|{TO_LANGUAGE_CODE.get(language, language)}|>"


# The audio sources of the speech-to-text contract: features (Whisper, Speech2Text), samples (Moonshine).
SOURCES = ("input_features", "input_values")


def is_speech_package(package: str | os.PathLike) -> bool:
    """Whether ``package``'s encoder graph takes audio (``input_features`` or ``input_values``)."""
    graph = Path(package) / "encoder" / "model.onnx"
    if not graph.is_file():
        return False
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    return any(i.name in SOURCES for i in model.graph.input)


class SpeechToTextGenerator(Seq2SeqGenerator):
    """A speech-to-text package (``encoder/`` over ``input_features``, ``decoder/``) in ONNX Runtime.

    The seq2seq generator's package and contract checks, with audio for the source:
    Whisper's log-mel features and no encoder mask, or (Speech2Text, Moonshine) the
    extractor's features or samples with their ``attention_mask``, the decoder then
    reading the encoder's ``encoder_attention_mask``. It transcribes audio
    (:meth:`transcribe_ids`) instead of generating from token ids.
    """

    encoder_inputs = frozenset({"input_features"})
    decoder_source_inputs = frozenset()
    contract = "speech-to-text"

    _feature_extractor = None

    def _check_contract(self) -> None:
        inputs = {i.name: i for i in self.encoder.get_inputs()}
        self._source = next((n for n in SOURCES if n in inputs), "input_features")
        self._masked = "attention_mask" in inputs
        if self._masked:  # the masked form of the contract (mobius_audio.tasks)
            self.encoder_inputs = frozenset({self._source, "attention_mask"})
            self.decoder_source_inputs = frozenset({"encoder_attention_mask"})
        super()._check_contract()
        self._features_type = ORT_FLOAT_TYPES.get(inputs[self._source].type)
        if self._features_type is None:
            raise PackageError("ONNX Runtime's Python API feeds float32 and float16 features only")

    def generate_ids(self, prompt_ids, **options):
        """Refused: a speech-to-text package's source is audio (see :meth:`transcribe_ids`)."""
        raise MobiusError(f"{self.package_dir} transcribes audio: give it a WAV file")

    @property
    def feature_extractor(self):
        """The package's feature extractor (``preprocessor_config.json``), loaded on first use."""
        if self._feature_extractor is None:
            if not (self.package_dir / "preprocessor_config.json").is_file():
                raise PackageError(
                    f"no preprocessor_config.json in {self.package_dir}: build from a checkpoint "
                    "that has its feature extractor"
                )
            from transformers import AutoFeatureExtractor

            self._feature_extractor = AutoFeatureExtractor.from_pretrained(
                str(self.package_dir), trust_remote_code=False
            )
        return self._feature_extractor

    def features(self, audio: np.ndarray, rate: int) -> dict[str, np.ndarray]:
        """The encoder's feeds of mono ``audio`` at ``rate`` Hz: the source (and its mask)."""
        extractor = self.feature_extractor
        target = int(extractor.sampling_rate)
        audio = resample(np.asarray(audio, np.float32), int(rate), target)
        limit = getattr(extractor, "n_samples", None)
        if limit and audio.size > limit:
            raise MobiusError(
                f"the audio lasts {audio.size / target:.1f} s; the model's window is "
                f"{limit / target:.0f} s (split longer audio first)"
            )
        feeds = extract_inputs(extractor, audio, target, self._source, mask=self._masked)
        feeds[self._source] = feeds[self._source].astype(self._features_type)
        return feeds

    def prompt_ids(self, cross) -> list[int]:
        """The decoder's first tokens, as transformers' Whisper ``generate`` makes them.

        Start token, then ``forced_decoder_ids`` (when neither ``language`` nor
        ``task`` is set); the language from ``language`` through ``lang_to_id``, else
        detected (the likeliest language token after the start token) when
        ``lang_to_id`` is there; the task; ``no_timestamps_token_id``. ``cross`` is
        the decoder's source feeds (:meth:`decoder_step`).
        """
        config = self.generation_config
        start = self._setting("decoder_start_token_id")
        if start is None:
            raise PackageError("config.json has no decoder_start_token_id: cannot start decoding")
        tokens: list[int | None] = [int(start)]
        language, task = config.get("language"), config.get("task")
        if language is None and task is None:
            forced = self._setting("forced_decoder_ids") or []
            tokens += [token for _, token in sorted(forced)]
        lang_to_id, task_to_id = config.get("lang_to_id") or {}, config.get("task_to_id") or {}
        if language is not None:
            key = _language_token(language, lang_to_id)
            if key not in lang_to_id:
                raise MobiusError(f"language {language!r} is not in the generation config")
            language_id = lang_to_id[key]
        elif lang_to_id and (len(tokens) < 2 or tokens[1] is None):
            logits = self.decoder_step(cross)([int(start)])
            ids = list(lang_to_id.values())
            language_id = ids[int(np.argmax(logits[ids]))]
        else:
            language_id = None
        if language_id is not None:
            tokens[1:2] = [language_id]
        task_ids = list(task_to_id.values())
        if task is not None:
            tokens = [t for t in tokens if t not in task_ids] + [task_to_id[task]]
        elif language is not None and task_to_id and not any(t in task_ids for t in tokens):
            tokens.append(task_to_id["transcribe"])
        no_timestamps = config.get("no_timestamps_token_id")
        if (
            no_timestamps is not None
            and not config.get("return_timestamps")
            and tokens[-1] != no_timestamps
        ):
            tokens.append(no_timestamps)
        return [int(t) for t in tokens if t is not None]

    def transcribe_ids(
        self,
        audio: np.ndarray,
        rate: int,
        *,
        max_new_tokens: int = 128,
        eos_token_ids: Iterable[int] | None = None,
        **sampling,
    ) -> Iterator[int]:
        """Yield the transcription's token ids (after the prompt; the end token is not yielded).

        The options are those of :meth:`mobius.generate.TextGenerator.generate_ids`.
        """
        stats = self.stats = GenerationStats()
        started = time.perf_counter()
        encoded = self.encoder.run(None, self.features(audio, rate))
        cross = self._cross_cache(encoded)
        if self._masked:
            mask = encoded[self._encoder_outputs.index("encoder_attention_mask")]
            cross["encoder_attention_mask"] = mask
        prompt = self.prompt_ids(cross)
        stats.prompt_tokens = len(prompt)
        context = int(self.config.get("max_target_positions") or 0)
        processors = [
            suppress_tokens(self._setting("suppress_tokens")),
            begin_suppress_tokens(self._setting("begin_suppress_tokens")),
        ]
        # transformers forces forced_bos_token_id as the token after a lone start token
        forced_bos = self._setting("forced_bos_token_id") if len(prompt) == 1 else None
        if forced_bos is not None:
            processors.append(force_token(forced_bos, at="first"))
        yield from self._run_loop(
            self.decoder_step(cross),
            prompt,
            stats=stats,
            started=started,
            room=context - len(prompt) if context else None,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            processors=processors,
            **sampling,
        )

    def stream(self, prompt: str, *, chat_template: bool = True, system=None, **options):
        """Yield the text of the WAV file at ``prompt`` as it is transcribed.

        ``options`` are those of :meth:`transcribe_ids`; a system message has no
        place in transcription.
        """
        if system is not None:
            raise MobiusError("a speech-to-text package takes no system message")
        if not Path(prompt).is_file():
            raise MobiusError(
                f"{self.package_dir} transcribes audio: give a WAV file, not {prompt!r}"
            )
        audio, rate = read_wav(prompt)
        tokenizer = self.tokenizer
        text = TextStream(lambda new: tokenizer.decode(new, skip_special_tokens=True))
        for token in self.transcribe_ids(audio, rate, **options):
            piece = text.push(token)
            if piece:
                yield piece
        rest = text.flush()
        if rest:
            yield rest


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """mobius-audio's ``mobius generate`` runner: transcribe the WAV file at ``prompt``."""
    generator = SpeechToTextGenerator(package_dir, threads=options.get("threads"))
    return stream_to_stdout(generator, prompt, options)
