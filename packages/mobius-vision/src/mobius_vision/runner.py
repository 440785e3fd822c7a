"""``mobius generate`` for vision–language packages: a prompt and images in, text streamed out.

The loop, for either form of the package (:class:`~mobius_vision.vl_model.OnnxVisionLanguage`):

1. the prompt: through the package's chat template when it has one (a user message of
   one image per ``--image``, then the text, as the processor's template expects), else
   as it is; a prompt without the family's placeholder (``<image>``...) gets one per
   image in front of it (``processor.with_placeholders``);
2. the family's torch-free processor (:mod:`mobius_vision.processing`) makes what
   transformers' processor makes: the ids with the image tokens expanded, the pixels,
   image sizes, ``token_type_ids``, M-RoPE positions;
3. the vision graph runs once, then the embedding and decoder prefill the prompt, and
   core's :func:`mobius.generate.decode_loop` samples each next token, fed back through
   the KV cache (greedy unless sampling options say otherwise).

A package that hears too (the Qwen Omni thinkers: an ``audio/`` graph) takes audio clips
(``--audio``, read by mobius-audio's :mod:`~mobius_audio.audio_file`): one placeholder
per clip, put in front of a prompt that holds none (``processor.with_audio_placeholders``).

A prompt with no images runs too. Example::

    from mobius_vision import generate_vl

    print(generate_vl("llava-out/", "What is in the picture?", images=["cat.png"]))

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from mobius.chat_template import render_chat_template
from mobius.errors import MobiusError
from mobius.generate import GenerationStats, PackageError, _Generator, read_graph, stream_to_stdout


def is_vision_language_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package is a split (``vision/``) or single-graph (``pixel_values``) VL build."""
    package = Path(package_dir)
    if (package / "vision" / "model.onnx").is_file():
        return True
    graph = package / "model.onnx"
    if not graph.is_file():
        return False

    model = read_graph(graph)
    return any(i.name.startswith("pixel_values") for i in model.graph.input)


class VisionLanguageGenerator(_Generator):
    """A vision–language package in ONNX Runtime, ready to generate from a prompt and images.

    ``threads`` and ``providers`` are ONNX Runtime's, as for core's
    :class:`~mobius.generate.TextGenerator`. The family's processor is loaded on first
    use; a family without one yet runs prompts without images.
    """

    contract = "vision-language"
    _processor = None  # the family's, loaded on first use

    @property
    def GRAPHS(self) -> dict[str, str]:  # noqa: N802 (core's _Generator opens these)
        """The single form's ``model.onnx``, else the split form's graphs (``audio/`` too
        where the package hears)."""
        if (self.package_dir / "model.onnx").is_file():
            return {"decoder": "model.onnx"}
        names = ["vision", "embedding", "decoder"]
        if (self.package_dir / "audio" / "model.onnx").is_file():
            names.insert(1, "audio")
        return {name: f"{name}/model.onnx" for name in names}

    def _check_contract(self) -> None:
        from mobius_vision.vl_model import OnnxVisionLanguage

        if not is_vision_language_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not a vision-language package built by mobius "
                "(no vision/model.onnx, nor a model.onnx that takes pixel_values)"
            )
        sessions = {
            self.package_dir / path: getattr(self, name) for name, path in self.GRAPHS.items()
        }
        self.model = OnnxVisionLanguage(self.package_dir, sessions.__getitem__)
        self._cache_outputs(self.model.past_inputs)  # refuses caches ORT's Python API cannot feed

    @property
    def model_type(self) -> str:
        value = self.config.get("model_type")
        return value if isinstance(value, str) else ""

    @property
    def processor(self):
        """The family's processor (:mod:`mobius_vision.processing`), loaded on first use."""
        if self._processor is None:
            from mobius_vision.processing import processor_for

            self._processor = processor_for(self.package_dir, self.model_type, self.tokenizer)
        return self._processor

    def _has_processor(self) -> bool:
        from mobius_vision.processing import PROCESSORS

        return self.model_type in PROCESSORS

    # -- the prompt ----------------------------------------------------------------------

    def chat_template(self) -> str | None:
        """The processor's chat template (``chat_template.json``/``.jinja``), else the tokenizer's."""
        from mobius_vision.processing._settings import read_json_object

        template = read_json_object(self.package_dir / "chat_template.json").get("chat_template")
        jinja = self.package_dir / "chat_template.jinja"
        if not isinstance(template, str) and jinja.is_file():
            template = jinja.read_text(encoding="utf-8")
        if not isinstance(template, str):
            template = getattr(self.tokenizer, "chat_template", None)
        return template if isinstance(template, str) and template else None

    def format_prompt(
        self,
        prompt: str,
        images: int,
        *,
        chat_template: bool = True,
        system: str | None = None,
        audios: int = 0,
    ) -> str:
        """The text the processor gets for ``prompt``, ``images`` images and ``audios`` clips
        (module docstring; the clips come before the images, as in Qwen2.5-Omni's examples)."""
        template = self.chat_template() if chat_template else None
        if template is not None:
            content = [{"type": "audio"}] * audios + [{"type": "image"}] * images
            content.append({"type": "text", "text": prompt})
            messages = [{"role": "user", "content": content}]
            if system is not None:
                messages.insert(
                    0, {"role": "system", "content": [{"type": "text", "text": system}]}
                )
            return render_chat_template(
                self.tokenizer,
                messages,
                source=self.package_dir,
                chat_template=template,
                add_generation_prompt=True,
            )
        if system is not None:
            raise MobiusError(
                "a system message needs a chat template"
                + ("; drop --no-chat-template" if not chat_template else " (the package has none)")
            )
        if audios:
            prompt = self.processor.with_audio_placeholders(prompt, audios)
        if images and self._has_processor():
            return self.processor.with_placeholders(prompt, images)
        return prompt

    def prepare(
        self,
        prompt: str,
        images: Sequence = (),
        *,
        chat_template: bool = True,
        system: str | None = None,
        audios: Sequence = (),
    ) -> dict[str, np.ndarray]:
        """The model inputs of ``prompt``, ``images`` (paths, PIL images or uint8 arrays) and
        ``audios`` (audio file paths, or float32 mono clips at the processor's rate)."""
        from mobius_vision.processing._image import open_image

        images = [open_image(i) if isinstance(i, (str, os.PathLike)) else i for i in images]
        audios = self.read_audios(audios)
        text = self.format_prompt(
            prompt, len(images), chat_template=chat_template, system=system, audios=len(audios)
        )
        if not images and not self._has_processor():  # a family without a processor yet
            ids = self.tokenizer(text, add_special_tokens=not self._starts_with_bos(text))
            ids = np.asarray([ids["input_ids"]], dtype=np.int64)
            return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        processor = self.processor
        processor.add_special_tokens = not self._starts_with_bos(text)
        return processor(text, images, audios) if audios else processor(text, images)

    def read_audios(self, audios: Sequence) -> list[np.ndarray]:
        """Each of ``audios`` (a file path, or float32 mono samples) as samples at the
        processor's rate; a package that does not hear refuses them."""
        if not audios:
            return []
        if not self.model.audio_names:
            raise MobiusError(f"{self.package_dir} takes no audio (it has no audio/ graph)")
        from mobius_audio.audio_file import read_audio

        rate = self.processor.sampling_rate
        return [read_audio(a, rate) if isinstance(a, (str, os.PathLike)) else a for a in audios]

    def _starts_with_bos(self, text: str) -> bool:
        """Whether ``text`` already starts with the BOS (a chat template wrote it)."""
        bos = self.tokenizer.bos_token
        return bool(bos) and text.startswith(bos)

    # -- the loop ------------------------------------------------------------------------

    def _prefill_positions(self, inputs: dict[str, np.ndarray], first: int):
        """The prompt's positions from ``first``, and the M-RoPE deltas (None for 1-D ones)."""
        length = inputs["input_ids"].shape[1]
        positions = np.arange(first, first + length, dtype=np.int64)[None, :]
        if self.model.position_rank != 3:
            return positions, None
        rope = self.processor.rope_positions(inputs) if self._has_processor() else None
        if rope is None:  # text only: every stream (3 for M-RoPE) is the text position
            streams = self.model.inputs["position_ids"].shape[0]
            return np.stack([positions] * streams), np.zeros((1, 1), np.int64)
        positions, deltas = rope
        return np.asarray(positions, np.int64), np.asarray(deltas, np.int64)

    def _image_inputs(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The processor's outputs the graphs take as image inputs (by name), or None for a
        prompt without images. Text-side outputs (``token_type_ids``,
        ``mm_token_type_ids``...) are not among them."""
        names = [i.name for i in self.model.image_inputs]
        vision = {name: inputs[name] for name in names if name in inputs}
        if not vision:
            return None
        audio = self.model.audio_names  # a prompt may hold images, audio, or both
        for group in ([n for n in names if n not in audio], audio):
            missing = sorted(set(group) - set(vision))
            if missing and len(missing) < len(group):
                raise MobiusError(
                    f"the {self.model_type} processor gave {sorted(inputs)}; the package's "
                    f"graph also takes {missing}"
                )
        return vision

    def generate_from_inputs(
        self,
        inputs: dict[str, np.ndarray],
        *,
        max_new_tokens: int = 128,
        eos_token_ids=None,
        **sampling,
    ) -> Iterator[int]:
        """Yield new token ids for processor ``inputs`` (:meth:`prepare`); the options are
        those of :meth:`mobius.generate.TextGenerator.generate_ids`.

        The prompt prefills the cache with the images; each next token then runs the
        embedding and decoder alone, at the next text position (plus the M-RoPE delta on
        every stream, as transformers' generate feeds it).
        """
        input_ids = np.asarray(inputs["input_ids"], np.int64)
        if input_ids.shape[1] == 0:
            raise MobiusError("the prompt is empty")
        stats = self.stats = GenerationStats(prompt_tokens=input_ids.shape[1])
        started = time.perf_counter()
        vision = self._image_inputs(inputs)
        first = self.processor.first_position if self._has_processor() else 0
        positions, deltas = self._prefill_positions(inputs, first)
        last = first + input_ids.shape[1] - 1  # the text position of the prompt's last token
        context = int(self._text_config().get("max_position_embeddings") or 0)
        cache, mask, prefilled = self.model.empty_cache(1), np.ones_like(input_ids), False

        def step(ids: list[int]) -> np.ndarray:
            nonlocal cache, mask, prefilled, last
            if not prefilled:  # ``ids`` is the prompt: feed the processor's inputs
                prefilled = True
                types = inputs.get("token_type_ids")
                logits, cache = self.model(input_ids, vision, mask, positions, cache, types)
                return logits[0, -1].astype(np.float32)
            last += 1
            mask = np.ones((1, mask.shape[1] + 1), np.int64)
            fed = np.asarray([[last]], np.int64)
            if deltas is not None:
                fed = np.stack([fed + deltas] * len(positions))  # on every stream
            logits, cache = self.model(np.asarray([ids], np.int64), None, mask, fed, cache)
            return logits[0, -1].astype(np.float32)

        yield from self._run_loop(
            step,
            input_ids[0].tolist(),
            stats=stats,
            started=started,
            room=context - last - 1 if context else None,
            eos_token_ids=eos_token_ids,
            max_new_tokens=max_new_tokens,
            **sampling,
        )

    def _text_config(self) -> dict:
        text = self.config.get("text_config")
        return text if isinstance(text, dict) else self.config

    def stream(
        self,
        prompt: str,
        *,
        images: Sequence = (),
        chat_template: bool = True,
        system: str | None = None,
        audios: Sequence = (),
        **options,
    ) -> Iterator[str]:
        """Yield text pieces as they are generated from ``prompt``, ``images`` and ``audios``.

        ``images`` are file paths, PIL images or uint8 arrays; ``audios`` audio file paths
        or float32 mono clips (packages that hear); keyword ``options`` are those of
        :meth:`generate_from_inputs`. Special tokens are left out of the text.
        """
        inputs = self.prepare(
            prompt, images, chat_template=chat_template, system=system, audios=audios
        )
        yield from self.text_pieces(self.generate_from_inputs(inputs, **options))


class _WithImages:
    """A generator with its images (and audio) bound: what
    :func:`mobius.generate.stream_to_stdout` streams."""

    def __init__(
        self, generator: VisionLanguageGenerator, images: Sequence, audios: Sequence = ()
    ) -> None:
        self.generator, self.images, self.audios = generator, list(images), list(audios)

    @property
    def stats(self) -> GenerationStats:
        return self.generator.stats

    def sampling_defaults(self) -> dict:
        return self.generator.sampling_defaults()

    def stream(self, prompt: str, **options) -> Iterator[str]:
        return self.generator.stream(prompt, images=self.images, audios=self.audios, **options)


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """``mobius generate`` on a vision–language package: stream the text, then the stats line."""
    from mobius_vision.processing._image import open_image

    images = [open_image(path) for path in options.get("images") or ()]  # bad files first
    generator = VisionLanguageGenerator(package_dir, threads=options.get("threads"))
    audios = generator.read_audios(options.get("audios") or ())
    return stream_to_stdout(_WithImages(generator, images, audios), prompt, options)


def generate_vl(
    package_dir: str | os.PathLike, prompt: str, images: Sequence = (), **options
) -> str:
    """The whole text generated from ``prompt`` and ``images`` by a vision–language package.

    ``images`` are file paths, PIL images or uint8 arrays; ``options`` are those of
    :meth:`VisionLanguageGenerator.stream` (``max_new_tokens``, ``do_sample``,
    ``temperature``, ``top_k``, ``top_p``, ``seed``, ``chat_template``, ``system``).
    """
    generator = VisionLanguageGenerator(package_dir)
    return "".join(generator.stream(prompt, images=images, **options))
