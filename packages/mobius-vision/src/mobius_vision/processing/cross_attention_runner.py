"""``mobius generate`` for cross-attention vision–language packages (Mllama).

Such a package (:mod:`mobius_vision.tasks.cross_attention_vl`) has no embedding graph:
its ``vision/`` graph turns the images into each cross-attention layer's keys and
values once, and its ``decoder/`` reads them at every step beside its own cache, with
``cross_attention_mask`` saying which tokens see which tiles (a decode step repeats
the prompt's last row, as transformers' ``generate`` does). Everything else (the
prompt, the processor, sampling, streaming) is the vision–language runner's
(:class:`~mobius_vision.runner.VisionLanguageGenerator`). Example::

    mobius generate llama-vision-out/ "Describe the picture." --image cat.png
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import GenerationStats, PackageError, stream_to_stdout
from mobius_vision.runner import VisionLanguageGenerator, _WithImages

#: What the vision graph makes, by the decoder's input names.
CROSS_CACHE = ".cross."


def is_cross_attention_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package is a cross-attention VL build: ``vision/`` and ``decoder/`` graphs,
    no ``embedding/``."""
    package = Path(package_dir)
    return (
        (package / "vision" / "model.onnx").is_file()
        and (package / "decoder" / "model.onnx").is_file()
        and not (package / "embedding" / "model.onnx").exists()
    )


class CrossAttentionGenerator(VisionLanguageGenerator):
    """A cross-attention VL package in ONNX Runtime (module docstring); the options are
    :class:`~mobius_vision.runner.VisionLanguageGenerator`'s."""

    GRAPHS = {"vision": "vision/model.onnx", "decoder": "decoder/model.onnx"}
    contract = "cross-attention vision-language"

    def _check_contract(self) -> None:
        inputs = {i.name: i for i in self.decoder.get_inputs()}
        if "cross_attention_mask" not in inputs:
            raise PackageError(
                f"{self.package_dir}/decoder/model.onnx takes no cross_attention_mask: "
                "not a cross-attention vision-language package built by mobius"
            )
        self.past_inputs = [
            i
            for i in inputs.values()
            if i.name.startswith("past_key_values.") and CROSS_CACHE not in i.name
        ]
        self._cache_outputs(self.past_inputs)
        self.output_names = [o.name for o in self.decoder.get_outputs()]

    def _empty_cache(self) -> dict[str, np.ndarray]:
        cache = {}
        for value in self.past_inputs:
            _batch, heads, _past, head_dim = value.shape
            dtype = np.float16 if value.type == "tensor(float16)" else np.float32
            cache[value.name] = np.zeros((1, heads, 0, head_dim), dtype)
        return cache

    def _cross_cache(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The vision graph's keys and values, named as the decoder takes them."""
        names = [i.name for i in self.vision.get_inputs()]
        missing = [n for n in names if n not in inputs]
        if missing:
            raise MobiusError(
                f"a {self.model_type} package needs an image (--image): its decoder "
                f"reads the images' {', '.join(missing)}"
            )
        values = self.vision.run(None, {n: inputs[n] for n in names})
        outputs = [
            o.name.replace("present.", "past_key_values.", 1) for o in self.vision.get_outputs()
        ]
        return dict(zip(outputs, values, strict=True))

    def _decode(self, input_ids, positions, cross_mask, cache, cross):
        """The decoder on ``input_ids`` after ``cache``: logits and the next cache."""
        feeds = dict(
            input_ids=input_ids,
            attention_mask=np.ones((1, int(positions[0, -1]) + 1), np.int64),
            position_ids=positions,
            cross_attention_mask=cross_mask,
            **cache,
            **cross,
        )
        outputs = dict(zip(self.output_names, self.decoder.run(None, feeds), strict=True))
        cache = {
            name.replace("present.", "past_key_values.", 1): value
            for name, value in outputs.items()
            if name.startswith("present.")
        }
        return outputs["logits"], cache

    def generate_from_inputs(
        self,
        inputs: dict[str, np.ndarray],
        *,
        max_new_tokens: int = 128,
        eos_token_ids=None,
        **sampling,
    ) -> Iterator[int]:
        """Yield new token ids for processor ``inputs`` (:meth:`prepare`): the images'
        cache once, the prompt, then one token a step."""
        input_ids = np.asarray(inputs["input_ids"], np.int64)
        if input_ids.shape[1] == 0:
            raise MobiusError("the prompt is empty")
        stats = self.stats = GenerationStats(prompt_tokens=input_ids.shape[1])
        started = time.perf_counter()
        cross = self._cross_cache(inputs)
        cross_mask = np.asarray(inputs["cross_attention_mask"], np.int64)
        cache, last, prefilled = self._empty_cache(), input_ids.shape[1] - 1, False

        def step(ids: list[int]) -> np.ndarray:
            nonlocal cache, cross_mask, last, prefilled
            if not prefilled:  # ``ids`` is the prompt
                prefilled = True
                fed, positions = input_ids, np.arange(last + 1, dtype=np.int64)[None]
            else:  # one new token, seeing what the prompt's last token sees
                last += 1
                fed, positions = np.asarray([ids], np.int64), np.asarray([[last]], np.int64)
                cross_mask = cross_mask[:, -1:]
            logits, cache = self._decode(fed, positions, cross_mask, cache, cross)
            return logits[0, -1].astype(np.float32)

        context = int(self._text_config().get("max_position_embeddings") or 0)
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


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """``mobius generate`` on a cross-attention VL package: stream the text, then the stats."""
    from mobius_vision.processing._image import open_image

    images = [open_image(path) for path in options.get("images") or ()]  # bad files first
    generator = CrossAttentionGenerator(package_dir, threads=options.get("threads"))
    return stream_to_stdout(_WithImages(generator, images), prompt, options)
