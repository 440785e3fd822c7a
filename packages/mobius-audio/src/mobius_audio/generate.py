"""Transcribe audio with a speech-to-text package (:mod:`mobius_audio.tasks`).

The audio file (WAV, FLAC, OGG, MP3: :mod:`mobius_audio.audio_file`) is decoded to
float32 mono at the feature extractor's rate. The package's own feature extractor
(``preprocessor_config.json``) makes the source on its numpy path; the encoder runs
once and the decoder steps greedily (or samples) through core's
:func:`mobius.generate.decode_loop`, from the decoder start token (Speech2Text,
Moonshine: with ``forced_bos_token_id`` next where set). ``suppress_tokens`` are never
generated and ``begin_suppress_tokens`` not as the first new token.

A Whisper package runs in :class:`mobius_audio.whisper_generate.WhisperGenerator`:
long-form audio, timestamps, language detection, ``language`` and ``task``, as
transformers' Whisper ``generate`` does them. :func:`open_speech_generator` picks
the class; :func:`transcribe` is the Python API; :func:`run_cli` is mobius-audio's
``mobius generate`` runner, for the packages :func:`is_speech_package` accepts.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import (
    ORT_FLOAT_TYPES,
    GenerationStats,
    PackageError,
    Seq2SeqGenerator,
    begin_suppress_tokens,
    force_token,
    read_graph,
    stream_to_stdout,
    suppress_tokens,
)
from mobius_audio.audio_file import FORMATS, decode_audio, read_audio, resample


def extract_features(feature_extractor, waves, sampling_rate: int) -> np.ndarray:
    """``input_features`` of ``waves`` (one array or a list) from the extractor's numpy path.

    transformers' Whisper extractor switches to torch whenever torch is importable;
    mobius runs without torch, so it asks for the numpy path in either case.
    """
    return extract_inputs(feature_extractor, waves, sampling_rate)["input_features"]


def extract_inputs(
    feature_extractor,
    waves,
    sampling_rate: int,
    name: str = "input_features",
    mask: bool = False,
    **options,
) -> dict[str, np.ndarray]:
    """The encoder's feeds of ``waves``: ``name`` (float32) and, with ``mask``, ``attention_mask``.

    With ``mask`` a batch is padded to its longest clip (1 real, 0 padding, int64);
    without it the extractor pads as it likes (Whisper: to its 30 s window).
    ``options`` go to the extractor (``truncation=False, padding="longest"``).
    """
    module = importlib.import_module(type(feature_extractor).__module__)
    probe = getattr(module, "is_torch_available", None)
    if probe is not None:
        module.is_torch_available = lambda: False
    if mask:
        options.update(padding=True, return_attention_mask=True)
    try:
        out = feature_extractor(waves, sampling_rate=sampling_rate, return_tensors="np", **options)
    finally:
        if probe is not None:
            module.is_torch_available = probe
    feeds = {name: np.asarray(out[name], np.float32)}
    if mask:
        feeds["attention_mask"] = np.asarray(out["attention_mask"], np.int64)
    return feeds


# The audio sources of the speech-to-text contract: features (Whisper, Speech2Text), samples (Moonshine).
SOURCES = ("input_features", "input_values")


def is_speech_package(package: str | os.PathLike) -> bool:
    """Whether ``package``'s encoder graph takes audio (``input_features`` or ``input_values``)
    and its decoder token ids (an audio codec's decoder takes codes)."""
    encoder, decoder = (Path(package) / part / "model.onnx" for part in ("encoder", "decoder"))
    if not encoder.is_file() or not decoder.is_file():
        return False

    def inputs(graph: Path) -> set[str]:
        return {i.name for i in read_graph(graph).graph.input}

    return bool(inputs(encoder) & set(SOURCES)) and "input_ids" in inputs(decoder)


class SpeechToTextGenerator(Seq2SeqGenerator):
    """A speech-to-text package (``encoder/`` over audio, ``decoder/``) in ONNX Runtime.

    The seq2seq generator's package and contract checks, with audio for the source:
    Whisper's log-mel features and no encoder mask, or (Speech2Text, Moonshine) the
    extractor's features or samples with their ``attention_mask``, the decoder then
    reading the encoder's ``encoder_attention_mask``. It transcribes audio
    (:meth:`transcribe_ids`) instead of generating from token ids.
    """

    encoder_inputs = frozenset({"input_features"})
    decoder_source_inputs = frozenset()
    contract = "speech-to-text"
    #: What :meth:`stream` passes to :meth:`transcribe_ids` (:meth:`set_options`).
    transcribe_options: dict = {}

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

    def set_options(self, *, language=None, task=None, timestamps=None) -> None:
        """Refused unless all None: language, task and timestamps belong to Whisper packages."""
        given = {"--language": language, "--task": task, "--timestamps": timestamps}
        flags = [flag for flag, value in given.items() if value is not None]
        if flags:
            verb = "apply" if len(flags) > 1 else "applies"
            raise MobiusError(
                f"{', '.join(flags)} {verb} to Whisper packages; {self.package_dir} is a "
                "speech-to-text package without language, task or timestamp tokens"
            )

    def generate_ids(self, prompt_ids, **options):
        """Refused: a speech-to-text package's source is audio (see :meth:`transcribe_ids`)."""
        raise MobiusError(
            f"{self.package_dir} transcribes audio: give it an audio file ({FORMATS})"
        )

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

    @property
    def sampling_rate(self) -> int:
        """The rate the feature extractor takes, in Hz."""
        return int(self.feature_extractor.sampling_rate)

    def features(self, audio: np.ndarray, rate: int) -> dict[str, np.ndarray]:
        """The encoder's feeds of mono ``audio`` at ``rate`` Hz: the source (and its mask)."""
        extractor = self.feature_extractor
        target = self.sampling_rate
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
        """The decoder's first tokens: its start token (``forced_bos_token_id`` is forced after it)."""
        start = self._setting("decoder_start_token_id")
        if start is None:
            raise PackageError("config.json has no decoder_start_token_id: cannot start decoding")
        return [int(start)]

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

    def is_text(self, token: int) -> bool:
        """Whether ``token`` belongs in the text (Whisper leaves its timestamps out)."""
        return True

    def _read(self, path: str, system) -> tuple[np.ndarray, int]:
        """The audio file at ``path`` at the extractor's rate; a system message is refused."""
        if system is not None:
            raise MobiusError("a speech-to-text package takes no system message")
        return read_audio(path, self.sampling_rate), self.sampling_rate

    def stream(self, prompt: str, *, chat_template: bool = True, system=None, **options):
        """Yield the text of the audio file at ``prompt`` as it is transcribed.

        ``options`` are those of :meth:`transcribe_ids`; a system message has no
        place in transcription.
        """
        audio, rate = self._read(prompt, system)
        tokens = self.transcribe_ids(audio, rate, **self.transcribe_options, **options)
        yield from self.text_pieces(token for token in tokens if self.is_text(token))


def open_speech_generator(package_dir: str | os.PathLike, **options) -> SpeechToTextGenerator:
    """The generator for a speech-to-text package: a Whisper one (``model_type`` ``whisper``,
    decoded as transformers' Whisper ``generate`` decodes) or the plain one."""
    config_path = Path(package_dir) / "config.json"
    model_type = None
    if config_path.is_file():
        try:
            model_type = json.loads(config_path.read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None  # the generator's own checks name the broken file
    if model_type == "whisper":
        from mobius_audio.whisper_generate import WhisperGenerator

        return WhisperGenerator(package_dir, **options)
    if model_type in ("seamless_m4t", "seamless_m4t_v2"):  # a target-language prompt
        from mobius_audio.seamless_generate import SeamlessM4TGenerator

        return SeamlessM4TGenerator(package_dir, **options)
    return SpeechToTextGenerator(package_dir, **options)


def transcribe(
    package_dir: str | os.PathLike,
    audio,
    *,
    sampling_rate: int | None = None,
    language: str | None = None,
    task: str | None = None,
    timestamps: bool = False,
    max_new_tokens: int = 128,
    threads: int | None = None,
    **sampling,
):
    """The transcription of ``audio`` by the speech-to-text package at ``package_dir``.

    ``audio`` is a file (WAV, FLAC, OGG, MP3) or mono samples at ``sampling_rate``
    Hz. Whisper packages also take ``language`` (``"de"``, ``"german"``,
    ``"<|de|>"``; default: the generation config's, else detected), ``task``
    (``"transcribe"`` or ``"translate"``; default: the generation config's) and
    ``timestamps``: then the result is a list of
    :class:`~mobius_audio.longform.Segment` (``start``, ``end`` in seconds,
    ``text``, ``tokens``) instead of the text. ``max_new_tokens`` counts per 30 s
    window; ``sampling`` is :func:`mobius.generate.decode_loop`'s (``do_sample``,
    ``temperature``, ``top_k``, ``top_p``, ``seed``).

    Example::

        import mobius_audio

        print(mobius_audio.transcribe("whisper-out/", "talk.mp3", language="en"))
        for segment in mobius_audio.transcribe("whisper-out/", "talk.mp3", timestamps=True):
            print(segment.line())
    """
    generator = open_speech_generator(package_dir, threads=threads)
    if isinstance(audio, (str, os.PathLike)):
        samples, rate = decode_audio(audio)
    elif sampling_rate is None:
        raise MobiusError("give the samples' rate: transcribe(package, samples, sampling_rate=...)")
    else:
        samples, rate = np.asarray(audio, np.float32), int(sampling_rate)
        if samples.ndim != 1:
            raise MobiusError(f"give mono samples (one dimension), not an array of {samples.shape}")
    # False means "as the generation config says" to the decoder; only True asks for segments.
    generator.set_options(language=language, task=task, timestamps=timestamps or None)
    options = dict(generator.transcribe_options, max_new_tokens=max_new_tokens, **sampling)
    if timestamps:
        return list(generator.transcribe_segments(samples, rate, **options))
    tokenizer = generator.tokenizer
    tokens = [t for t in generator.transcribe_ids(samples, rate, **options) if generator.is_text(t)]
    return tokenizer.decode(tokens, skip_special_tokens=True)


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """mobius-audio's ``mobius generate`` runner: transcribe the audio file at ``prompt``."""
    generator = open_speech_generator(package_dir, threads=options.get("threads"))
    generator.set_options(
        language=options.get("language"),
        task=options.get("speech_task"),
        timestamps=options.get("timestamps"),
    )
    generator.progress = True
    return stream_to_stdout(generator, prompt, options)
