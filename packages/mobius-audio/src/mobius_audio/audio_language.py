"""``mobius generate`` for speech LLMs (audio–language packages): a prompt and audio in, text out.

The package (:mod:`mobius_audio.tasks_audio_language`: ``audio/``, ``embedding/``,
``decoder/``) runs in core's :class:`~mobius.multimodal.OnnxMultimodalDecoder`:

1. each ``--audio`` file is read as float32 mono at the feature extractor's rate
   (:mod:`mobius_audio.audio_file`);
2. the family's torch-free processor (:mod:`mobius_audio.audio_language_processor`)
   makes what transformers' processor makes: the prompt through the chat template,
   the audio placeholders expanded to each clip's token count, the log-mel features;
3. the audio graph runs once, the embedding and decoder prefill the prompt, and core's
   :func:`mobius.generate.decode_loop` picks each next token (greedy unless sampling
   options say otherwise), fed back through the KV cache.

Example::

    from mobius_audio.audio_language import AudioLanguageGenerator

    generator = AudioLanguageGenerator("qwen2-audio-out/")
    print("".join(generator.stream("What is said?", audios=["clip.wav"])))
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import GenerationStats, PackageError, _Generator, stream_to_stdout
from mobius.multimodal import OnnxMultimodalDecoder

GRAPHS = ("audio", "embedding", "decoder")


def is_audio_language_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package holds the audio–language graphs (and no vision/ graph, which
    mobius-vision's runner takes)."""
    package = Path(package_dir)
    if (package / "vision" / "model.onnx").is_file():
        return False
    return all((package / name / "model.onnx").is_file() for name in GRAPHS)


class OnnxAudioLanguage(OnnxMultimodalDecoder):
    """A split audio–language package driven step by step."""

    ENCODERS = ("audio",)


class AudioLanguageGenerator(_Generator):
    """A speech-LLM package in ONNX Runtime, ready to generate from a prompt and audio clips."""

    GRAPHS = {name: f"{name}/model.onnx" for name in GRAPHS}
    contract = "audio-language"
    _processor = None

    def _check_contract(self) -> None:
        sessions = {self.package_dir / path: getattr(self, n) for n, path in self.GRAPHS.items()}
        self.model = OnnxAudioLanguage(self.package_dir, sessions.__getitem__)
        self._cache_outputs(self.model.past_inputs)

    @property
    def processor(self):
        """The family's processor (:data:`~mobius_audio.audio_language_processor.PROCESSORS`)."""
        if self._processor is None:
            from mobius_audio.audio_language_processor import PROCESSORS

            model_type = self.config.get("model_type")
            if model_type not in PROCESSORS:
                raise PackageError(
                    f"{self.package_dir}: no prompt processor for model_type {model_type!r} "
                    f"(mobius-audio has {', '.join(sorted(PROCESSORS))})"
                )
            template = self.chat_template()
            self._processor = PROCESSORS[model_type](self.package_dir, self.tokenizer, template)
        return self._processor

    def chat_template(self) -> str | None:
        """The processor's chat template (``chat_template.jinja``/``.json``), else the tokenizer's."""
        jinja = self.package_dir / "chat_template.jinja"
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        from mobius_audio.audio_language_processor import _read_object

        template = _read_object(self.package_dir / "chat_template.json").get("chat_template")
        if not isinstance(template, str):
            template = getattr(self.tokenizer, "chat_template", None)
        return template if isinstance(template, str) and template else None

    def read_audios(self, audios: Sequence) -> list[np.ndarray]:
        """Each of ``audios`` (a file path, or float32 mono samples) at the processor's rate."""
        from mobius_audio.audio_file import read_audio

        rate = self.processor.sampling_rate
        return [read_audio(a, rate) if isinstance(a, (str, os.PathLike)) else a for a in audios]

    def generate_from_inputs(
        self, inputs: dict[str, np.ndarray], *, max_new_tokens: int = 128, eos_token_ids=None,
        **sampling,
    ) -> Iterator[int]:  # fmt: skip
        """Yield new token ids for processor ``inputs``; the options are those of
        :meth:`mobius.generate.TextGenerator.generate_ids`."""
        input_ids = np.asarray(inputs["input_ids"], np.int64)
        if input_ids.shape[1] == 0:
            raise MobiusError("the prompt is empty")
        stats = self.stats = GenerationStats(prompt_tokens=input_ids.shape[1])
        started = time.perf_counter()
        audio = {k: v for k, v in inputs.items() if k != "input_ids"} or None
        length = input_ids.shape[1]
        cache, mask = self.model.empty_cache(1), np.ones_like(input_ids)
        text = self.config.get("text_config")
        context = int((text if isinstance(text, dict) else {}).get("max_position_embeddings") or 0)

        prefilled = False

        def step(ids: list[int]) -> np.ndarray:
            nonlocal cache, mask, prefilled
            if not prefilled:  # ``ids`` is the prompt: feed the audio with it
                prefilled = True
                positions = np.arange(length, dtype=np.int64)[None, :]
                logits, cache = self.model(input_ids, audio, mask, positions, cache)
                return logits[0, -1].astype(np.float32)
            positions = np.asarray([[mask.shape[1]]], np.int64)
            mask = np.ones((1, mask.shape[1] + 1), np.int64)
            logits, cache = self.model(np.asarray([ids], np.int64), None, mask, positions, cache)
            return logits[0, -1].astype(np.float32)

        yield from self._run_loop(
            step,
            input_ids[0].tolist(),
            stats=stats,
            started=started,
            room=context - length if context else None,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            **sampling,
        )

    def stream(
        self,
        prompt: str,
        *,
        audios: Sequence = (),
        chat_template: bool = True,
        system: str | None = None,
        **options,
    ) -> Iterator[str]:
        """Yield text pieces generated from ``prompt`` and ``audios`` (file paths or float32
        mono clips); ``options`` are those of :meth:`generate_from_inputs`."""
        clips = self.read_audios(audios)
        inputs = self.processor(prompt, clips, chat_template=chat_template, system=system)
        yield from self.text_pieces(self.generate_from_inputs(inputs, **options))


class _WithAudio:
    """A generator with its clips bound: what :func:`mobius.generate.stream_to_stdout` streams."""

    def __init__(self, generator: AudioLanguageGenerator, audios: list) -> None:
        self.generator, self.audios = generator, audios
        self.package_dir = generator.package_dir

    @property
    def stats(self) -> GenerationStats:
        return self.generator.stats

    def sampling_defaults(self) -> dict:
        return self.generator.sampling_defaults()

    def stream(self, prompt: str, **options) -> Iterator[str]:
        return self.generator.stream(prompt, audios=self.audios, **options)


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """``mobius generate`` on an audio–language package: stream the text, then the stats line."""
    generator = AudioLanguageGenerator(package_dir, threads=options.get("threads"))
    audios = generator.read_audios(options.get("audios") or ())  # bad files before decoding
    return stream_to_stdout(_WithAudio(generator, audios), prompt, options)
