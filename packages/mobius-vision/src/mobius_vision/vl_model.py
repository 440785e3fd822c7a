"""A built vision–language package in ONNX Runtime, driven one step at a time.

Both forms of :mod:`mobius_vision.tasks.vision_language` run here: the split form (the
``vision/`` graph once per prompt, ``embedding/`` on every step, ``decoder/`` with its
cache) and the single ``model.onnx`` (``pixel_values`` beside the causal-LM inputs, no
images on decode steps). The runner (:mod:`mobius_vision.runner`) and the parity kit
(:mod:`mobius_vision.testing`) share this class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Decoder inputs that are not images (the single form's other inputs are the images').
TEXT_INPUTS = ("input_ids", "attention_mask", "position_ids", "token_type_ids")
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def cpu_session(path: Path):
    """An ONNX Runtime session of ``path`` on the CPU with ONNX Runtime's default options."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _empty(info) -> np.ndarray:
    """An ONNX Runtime input's value with its symbolic dimensions at zero (no images)."""
    dtype = np.int64 if info.type == "tensor(int64)" else _ORT_TYPES.get(info.type, np.float32)
    return np.zeros([0 if isinstance(d, str) or d is None else d for d in info.shape], dtype)


def _as_input(info, value: np.ndarray) -> np.ndarray:
    """``value`` in the element type the graph input ``info`` takes (float32 pixels into an
    f16 build)."""
    dtype = _ORT_TYPES.get(info.type)
    return value.astype(dtype) if dtype is not None and value.dtype != dtype else value


class OnnxVisionLanguage:
    """A built VL package (``--form single`` or ``split``) driven step by step.

    ``open_session(path)`` opens each graph (default: :func:`cpu_session`);
    ``decoder_session`` opens the decoder (default: ``open_session``).
    """

    def __init__(
        self,
        package: Path,
        open_session: Callable[[Path], object] = cpu_session,
        decoder_session: Callable[[Path], object] | None = None,
    ) -> None:
        package = Path(package)
        self.single = (package / "model.onnx").exists()
        decoder = package / ("model.onnx" if self.single else "decoder/model.onnx")
        self.session = (decoder_session or open_session)(decoder)
        self.vision = self.embedding = None
        if not self.single:
            self.vision = open_session(package / "vision/model.onnx")
            self.embedding = open_session(package / "embedding/model.onnx")
        inputs = self.session.get_inputs()
        self.inputs = {i.name: i for i in inputs}
        self.past_inputs = [i for i in inputs if i.name.startswith("past_key_values.")]
        self.output_names = [o.name for o in self.session.get_outputs()]
        # pixel_values and any other vision input (image_sizes...) of the single graph
        self.vision_names = [
            i.name for i in inputs if i.name not in TEXT_INPUTS and i not in self.past_inputs
        ]
        self.decoder_inputs = set(self.inputs)

    @property
    def image_inputs(self) -> list:
        """The graph inputs that take the processor's image outputs (pixel_values...)."""
        if self.single:
            return [self.inputs[name] for name in self.vision_names]
        return list(self.vision.get_inputs())

    @property
    def position_rank(self) -> int:
        """2 for ``position_ids`` [batch, sequence], 3 for M-RoPE's [3, batch, sequence]."""
        return len(self.inputs["position_ids"].shape)

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        """Zero-length KV caches and zero-filled fixed-size states (conv, ssm)."""
        cache = {}
        for inp in self.past_inputs:
            shape = [batch if d == "batch" else 0 if isinstance(d, str) else d for d in inp.shape]
            cache[inp.name] = np.zeros(shape, dtype=_ORT_TYPES.get(inp.type, np.float32))
        return cache

    def __call__(
        self, input_ids, vision: dict[str, np.ndarray] | None, mask, positions, cache, types=None
    ):
        """Logits and the next cache; ``vision`` holds the processor's image inputs, or None.

        ``types`` is the processor's ``token_type_ids``, for decoders that take them
        (zeros on decode steps).
        """
        if self.single:
            if vision is None:  # no images on a decode step: empty image inputs
                vision = {n: _empty(self.inputs[n]) for n in self.vision_names}
            images = {n: _as_input(self.inputs[n], vision[n]) for n in self.vision_names}
            return self._run_decoder({"input_ids": input_ids, **images}, mask, positions, cache)
        features = self.image_features(vision)
        values = self.embedding.run(None, {"input_ids": input_ids, **features})
        names = [o.name for o in self.embedding.get_outputs()]
        # inputs_embeds and any other embedding output the decoder takes (DeepStack's)
        feeds = {n: v for n, v in zip(names, values, strict=True) if n in self.decoder_inputs}
        if "token_type_ids" in self.decoder_inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids) if types is None else types
        return self._run_decoder(feeds, mask, positions, cache)

    def image_features(self, vision: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """The vision graph's outputs by name (``image_features``...), each empty without images."""
        if vision is None:
            return {i.name: _empty(i) for i in self.embedding.get_inputs() if i.name != "input_ids"}
        feeds = {i.name: _as_input(i, vision[i.name]) for i in self.vision.get_inputs()}
        values = self.vision.run(None, feeds)
        return dict(zip([o.name for o in self.vision.get_outputs()], values, strict=True))

    def _run_decoder(self, feeds, mask, positions, cache):
        feeds = dict(feeds, attention_mask=mask, position_ids=positions, **cache)
        outputs = dict(zip(self.output_names, self.session.run(None, feeds), strict=True))
        present = {
            name.replace("present.", "past_key_values."): value
            for name, value in outputs.items()
            if name.startswith("present.")
        }
        return outputs["logits"], present
