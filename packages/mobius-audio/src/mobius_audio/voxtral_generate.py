"""``mobius generate`` for Voxtral: mistral-common's Tekken tokenizer makes the prompt.

A Voxtral package is an ``audio-language`` package (:mod:`mobius_audio.audio_language`
runs it) whose tokenizer is ``tekken.json`` (:mod:`mobius_audio.voxtral_source` keeps it).
What transformers' ``VoxtralProcessor`` does with mistral-common, :class:`VoxtralInputs`
does without torch:

- a chat prompt (``apply_chat_template``): one user message, every ``--audio`` clip first,
  then the text (``--system``: a system message before it), encoded by mistral-common's
  ``encode_chat_completion``: ``<s>[INST][BEGIN_AUDIO][AUDIO]...text[/INST]``;
- a transcription (``apply_transcription_request``, with ``--language xx`` or ``--task
  transcribe``): mistral-common's ``encode_transcription`` of the one audio file given as
  PROMPT: ``<s>[INST][BEGIN_AUDIO][AUDIO]...[/INST]lang:xx[TRANSCRIBE]`` (no ``lang:``
  without a language: the model tells it).

mistral-common pads each clip with zeros to whole chunks (``chunk_length_s`` of
tekken.json's audio settings: 30 s for the hub's models) and gives each chunk its
``[AUDIO]`` tokens (375 a chunk there); the clips it returns go through Whisper's log-mel
extractor (transformers' ``WhisperFeatureExtractor``, numpy path, the package's
``preprocessor_config.json``) one by one, each cut into chunks of ``2 *
max_source_positions`` frames: ``input_features`` [chunks, mel_bins, frames], the audio
graph's input. The clips reach mistral-common as float WAV bytes, so it decodes exactly
the samples :func:`mobius_audio.audio_file.read_audio` read. Text is mistral-common's
decode of the new tokens, special tokens left out.

Example::

    from mobius_audio.voxtral_generate import VoxtralGenerator

    generator = VoxtralGenerator("voxtral-out/")
    print("".join(generator.stream("What is said?", audios=["clip.wav"])))
    print("".join(generator.transcribe("speech.wav", language="en")))
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import PackageError, stream_to_stdout
from mobius_audio.audio_language import (
    AudioLanguageGenerator,
    _WithAudio,
    is_audio_language_package,
)
from mobius_audio.audio_language_processor import _read_object, whisper_feature_extractor
from mobius_audio.voxtral_source import MODEL_TYPE, TEKKEN

#: What mistral-common raises for a request or file it refuses (besides its own exceptions).
_REFUSALS = (ValueError, KeyError, TypeError, AssertionError)


def is_voxtral_package(package_dir: str | os.PathLike) -> bool:
    """Whether ``package_dir`` is an audio–language package built from a Voxtral checkpoint."""
    if not is_audio_language_package(package_dir):
        return False
    try:
        config = _read_object(Path(package_dir) / "config.json")
    except MobiusError:
        return False  # the audio-language runner names the broken file
    return config.get("model_type") == MODEL_TYPE


def _mistral_failure(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def load_tekken(package_dir: Path):
    """mistral-common's ``MistralTokenizer`` of the package's ``tekken.json``, one-line errors."""
    path = package_dir / TEKKEN
    if not path.is_file():
        raise PackageError(
            f"no {TEKKEN} in {package_dir}: Voxtral's tokenizer is mistral-common's Tekken "
            f"file; build from a checkpoint that has it (the hub's Voxtral does)"
        )
    try:
        from mistral_common.exceptions import MistralCommonException
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    except ImportError:
        raise MobiusError(
            "Voxtral's tokenizer needs mistral-common: pip install mobius-audio[run]"
        ) from None
    try:  # a JSON file: vocabulary, special tokens, settings; nothing in it runs
        return MistralTokenizer.from_file(str(path))
    except (OSError, MistralCommonException, *_REFUSALS) as exc:
        raise PackageError(f"cannot load {path}: {_mistral_failure(exc)}") from None


def _positive_int(settings: dict, name: str, where: str) -> int:
    value = settings.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PackageError(f"config.json: {where}.{name} is {value!r}, not a positive int")
    return value


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """``samples`` as a float32 WAV file in memory: what mistral-common decodes exactly back."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


class TekkenText:
    """What the runner's text streaming asks of a tokenizer, over mistral-common's."""

    def __init__(self, mistral) -> None:
        self.mistral = mistral

    @property
    def eos_token_id(self) -> int:
        return int(self.mistral.instruct_tokenizer.tokenizer.eos_id)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        policy = SpecialTokenPolicy.IGNORE if skip_special_tokens else SpecialTokenPolicy.KEEP
        return self.mistral.decode([int(i) for i in ids], special_token_policy=policy)


class VoxtralInputs:
    """``VoxtralProcessor`` in numpy over mistral-common (module docstring): ``input_ids``
    [1, sequence] and, with audio, ``input_features`` [chunks, mel_bins, frames]."""

    def __init__(self, package_dir: Path, mistral, config: dict) -> None:
        self.mistral = mistral
        encoder = mistral.instruct_tokenizer.audio_encoder
        if encoder is None:
            raise PackageError(f"{package_dir / TEKKEN} has no audio settings")
        settings = encoder.audio_config
        self.audio_token = encoder.special_ids.audio
        self.feature_extractor = extractor = whisper_feature_extractor(package_dir)
        audio = config.get("audio_config")
        audio = audio if isinstance(audio, dict) else {}
        positions = _positive_int(audio, "max_source_positions", "audio_config")
        width = _positive_int(audio, "hidden_size", "audio_config")
        stacked = _positive_int(audio, "intermediate_size", "audio_config")
        mels = _positive_int(audio, "num_mel_bins", "audio_config")
        if extractor.feature_size != mels:
            raise PackageError(
                f"{package_dir}: preprocessor_config.json's feature_size {extractor.feature_size} "
                f"is not audio_config.num_mel_bins {mels}"
            )
        self.chunk_frames = 2 * positions  # the audio graph's fixed window
        self.tokens_per_chunk = positions * width // stacked
        where = f"{package_dir}: {TEKKEN}'s audio settings"
        if settings.sampling_rate != extractor.sampling_rate:
            raise PackageError(
                f"{where}: sampling_rate {settings.sampling_rate} is not the feature "
                f"extractor's {extractor.sampling_rate}"
            )
        if not settings.chunk_length_s:
            raise PackageError(f"{where}: no chunk_length_s (Voxtral's encoder reads chunks)")
        self.chunk_samples = settings.chunk_frames
        if self.chunk_samples != self.chunk_frames * extractor.hop_length:
            raise PackageError(
                f"{where}: chunks of {settings.chunk_length_s} s are not the audio graph's "
                f"{self.chunk_frames} frames of {extractor.hop_length} samples"
            )
        if self.audio_token != config.get("audio_token_id"):
            raise PackageError(
                f"{where}: [AUDIO] is token {self.audio_token}, config.json's audio_token_id "
                f"is {config.get('audio_token_id')!r}"
            )

    @property
    def sampling_rate(self) -> int:
        return int(self.feature_extractor.sampling_rate)

    def __call__(
        self, prompt: str, clips: list, *, chat_template: bool = True, system: str | None = None
    ) -> dict[str, np.ndarray]:
        """The inputs of one user message: every clip, then ``prompt`` (what
        :meth:`~mobius_audio.audio_language.AudioLanguageGenerator.stream` asks)."""
        if not chat_template:
            raise MobiusError(
                "Voxtral's prompt is always mistral-common's instruct format: "
                "--no-chat-template does not apply"
            )
        return self.chat(prompt, clips, system=system)

    def chat(self, prompt: str, clips: list, *, system: str | None = None):
        """The inputs of one user message: every clip, then ``prompt``."""
        from mistral_common.protocol.instruct.chunk import AudioChunk, TextChunk
        from mistral_common.protocol.instruct.messages import SystemMessage, UserMessage
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        if not prompt and not clips:
            raise MobiusError("the prompt is empty")
        content = [AudioChunk(input_audio=self._wav(clip)) for clip in clips]
        if prompt:
            content.append(TextChunk(text=prompt))
        messages = [] if system is None else [SystemMessage(content=system)]
        messages.append(UserMessage(content=content))
        return self._encode(
            lambda: self.mistral.encode_chat_completion(ChatCompletionRequest(messages=messages))
        )

    def transcription(self, clip: np.ndarray, language: str | None = None):
        """The inputs of a transcription request for ``clip`` (in ``language``, an ISO 639-1
        code, else the model tells it)."""
        from mistral_common.protocol.transcription.request import TranscriptionRequest

        audio = self._wav(clip)
        try:
            request = TranscriptionRequest(model=MODEL_TYPE, audio=audio, language=language)
        except ValueError:  # pydantic's ValidationError
            raise MobiusError(
                f"--language {language!r} is not an ISO 639-1 code (en, fr, de, ...)"
            ) from None
        return self._encode(lambda: self.mistral.encode_transcription(request))

    def _wav(self, clip: np.ndarray) -> bytes:
        clip = np.asarray(clip, np.float32).reshape(-1)
        if clip.size == 0:
            raise MobiusError("an audio clip holds no samples")
        return wav_bytes(clip, self.sampling_rate)

    def _encode(self, encode) -> dict[str, np.ndarray]:
        from mistral_common.exceptions import MistralCommonException

        try:
            tokenized = encode()
        except (MistralCommonException, *_REFUSALS) as exc:
            raise MobiusError(
                f"mistral-common refuses the request: {_mistral_failure(exc)}"
            ) from None
        ids = np.asarray([tokenized.tokens], np.int64)
        if not tokenized.audios:
            return {"input_ids": ids}
        features = np.concatenate([self.chunk_features(a.audio_array) for a in tokenized.audios])
        placeholders = int((ids == self.audio_token).sum())
        if placeholders != len(features) * self.tokens_per_chunk:
            raise PackageError(
                f"{TEKKEN} gives {placeholders} [AUDIO] tokens for {len(features)} chunk(s); "
                f"the audio graph makes {self.tokens_per_chunk} a chunk"
            )
        return {"input_ids": ids, "input_features": features}

    def chunk_features(self, samples: np.ndarray) -> np.ndarray:
        """``[chunks, mel_bins, chunk_frames]``: one padded clip's log-mel, cut into chunks."""
        from mobius_audio.generate import extract_inputs

        options = dict(padding="longest", pad_to_multiple_of=self.chunk_samples, truncation=False)
        rate = self.sampling_rate
        features = extract_inputs(self.feature_extractor, [samples], rate, **options)
        (clip,) = features["input_features"]  # [mel_bins, whole chunks' frames]
        return clip.reshape(clip.shape[0], -1, self.chunk_frames).transpose(1, 0, 2)


class VoxtralGenerator(AudioLanguageGenerator):
    """A Voxtral package in ONNX Runtime: chat about audio clips, or transcribe one."""

    _mistral = None

    @property
    def mistral(self):
        """mistral-common's tokenizer of the package's ``tekken.json``, loaded on first use."""
        if self._mistral is None:
            self._mistral = load_tekken(self.package_dir)
        return self._mistral

    @property
    def tokenizer(self) -> TekkenText:
        if self._tokenizer is None:
            self._tokenizer = TekkenText(self.mistral)
        return self._tokenizer

    @property
    def processor(self) -> VoxtralInputs:
        if self._processor is None:
            self._processor = VoxtralInputs(self.package_dir, self.mistral, self.config)
        return self._processor

    @property
    def eos_token_ids(self) -> list[int]:
        """The generation config's, else Tekken's ``</s>``."""
        return super().eos_token_ids or [self.tokenizer.eos_token_id]

    def transcribe(self, audio, *, language: str | None = None, **options) -> Iterator[str]:
        """Yield the transcript of ``audio`` (a file path or float32 mono samples)."""
        (clip,) = self.read_audios([audio])
        inputs = self.processor.transcription(clip, language)
        yield from self.text_pieces(self.generate_from_inputs(inputs, **options))


class _Transcribing(_WithAudio):
    """A generator bound to one transcription: what :func:`stream_to_stdout` streams."""

    def __init__(self, generator: VoxtralGenerator, clip: np.ndarray, language) -> None:
        super().__init__(generator, [clip])
        self.language = language

    def stream(self, prompt: str, *, chat_template: bool = True, system=None, **options):
        if system is not None:
            raise MobiusError("--system does not apply to a transcription")
        (clip,) = self.audios
        return self.generator.transcribe(clip, language=self.language, **options)


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """``mobius generate`` on a Voxtral package: a chat answer, or with ``--language`` / ``--task
    transcribe`` the transcript of the audio file given as PROMPT."""
    task, language = options.get("speech_task"), options.get("language")
    if task == "translate":
        raise MobiusError(
            "Voxtral has no translate task: ask for a translation in the prompt "
            '(--audio clip.wav "Translate this into English")'
        )
    generator = VoxtralGenerator(package_dir, threads=options.get("threads"))
    audios = options.get("audios") or []
    if task is None and language is None:
        clips = generator.read_audios(audios)  # bad files before decoding
        return stream_to_stdout(_WithAudio(generator, clips), prompt, options)
    if audios:
        raise MobiusError(
            "a transcription reads the one audio file given as PROMPT; --audio is for chat prompts"
        )
    (clip,) = generator.read_audios([prompt])
    return stream_to_stdout(_Transcribing(generator, clip, language), "", options)
