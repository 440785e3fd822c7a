"""A built multimodal-decoder package in ONNX Runtime, driven one step at a time.

Both forms of :mod:`mobius.tasks._multimodal` run here: the split form (each encoder
graph once per prompt, ``embedding/`` on every step, ``decoder/`` with its cache) and
the single ``model.onnx`` (the encoders' inputs beside the causal-LM inputs, none on
decode steps). A domain's runner and parity kit subclass :class:`OnnxMultimodalDecoder`
with the encoder folders its packages hold (``ENCODERS``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Decoder inputs that are not an encoder's (the single form's other inputs are).
TEXT_INPUTS = ("input_ids", "attention_mask", "position_ids", "token_type_ids")
#: (int64: a processor's bool masks go into int64 mask inputs, Aria's ``pixel_mask``; bool:
#: the masks a graph takes as onnxruntime-genai feeds them, Phi-4-multimodal's audio mask.)
_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def cpu_session(path: Path):
    """An ONNX Runtime session of ``path`` on the CPU with ONNX Runtime's default options
    (:func:`mobius.generate.load_session`: a corrupt graph is a one-line PackageError)."""
    from mobius.generate import load_session

    return load_session(path)


def empty_input(info) -> np.ndarray:
    """An ONNX Runtime input's value with its symbolic dimensions at zero (no items)."""
    dtype = np.int64 if info.type == "tensor(int64)" else _ORT_TYPES.get(info.type, np.float32)
    return np.zeros([0 if isinstance(d, str) or d is None else d for d in info.shape], dtype)


def as_input(info, value: np.ndarray) -> np.ndarray:
    """``value`` in the element type the graph input ``info`` takes (float32 features into
    an f16 build)."""
    dtype = _ORT_TYPES.get(info.type)
    return value.astype(dtype) if dtype is not None and value.dtype != dtype else value


class OnnxMultimodalDecoder:
    """A built multimodal-decoder package (``single`` or ``split`` form) driven step by step.

    ``open_session(path)`` opens each graph (default: :func:`cpu_session`);
    ``decoder_session`` opens the decoder (default: ``open_session``).
    """

    #: The split form's encoder folders this kind of package may hold, in the order the
    #: embedding graph takes their outputs; each is opened where its graph exists.
    ENCODERS: tuple[str, ...] = ()

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
        self.embedding = None
        #: The split form's encoder graphs beside embedding/ and decoder/, by folder name.
        self.encoders = {}
        if not self.single:
            for name in self.ENCODERS:
                if (package / name / "model.onnx").is_file():
                    self.encoders[name] = open_session(package / name / "model.onnx")
            self.embedding = open_session(package / "embedding/model.onnx")
        inputs = self.session.get_inputs()
        self.inputs = {i.name: i for i in inputs}
        self.past_inputs = [i for i in inputs if i.name.startswith("past_key_values.")]
        self.output_names = [o.name for o in self.session.get_outputs()]
        # the single graph's encoder inputs (pixel_values, input_features...)
        self.single_encoder_names = [
            i.name for i in inputs if i.name not in TEXT_INPUTS and i not in self.past_inputs
        ]
        self.decoder_inputs = set(self.inputs)

    @property
    def encoder_inputs(self) -> list:
        """The graph inputs that take the processor's non-text outputs (pixel_values,
        input_features...)."""
        if self.single:
            return [self.inputs[name] for name in self.single_encoder_names]
        encoders = [i for session in self.encoders.values() for i in session.get_inputs()]
        return encoders + self._given_embedding_inputs()

    def _given_embedding_inputs(self) -> list:
        """The embedding graph's inputs the processor gives (Kosmos-2's
        ``image_embeds_position_mask``): neither ``input_ids`` nor an encoder's output."""
        made = {o.name for session in self.encoders.values() for o in session.get_outputs()}
        inputs = self.embedding.get_inputs()
        return [i for i in inputs if i.name != "input_ids" and i.name not in made]

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
        self, input_ids, given: dict[str, np.ndarray] | None, mask, positions, cache, types=None
    ):
        """Logits and the next cache; ``given`` holds the processor's non-text inputs by name
        (pixel_values, input_features...), or None on a decode step.

        ``types`` is the processor's ``token_type_ids``, for decoders that take them
        (zeros on decode steps).
        """
        if self.single:
            given = given or {}  # nothing but text on a decode step: empty encoder inputs
            encoder_feeds = {
                n: as_input(self.inputs[n], given[n]) if n in given else empty_input(self.inputs[n])
                for n in self.single_encoder_names
            }
            feeds = {"input_ids": input_ids, **encoder_feeds}
            return self._run_decoder(feeds, mask, positions, cache)
        features = self.encoder_features(given)
        values = self.embedding.run(None, {"input_ids": input_ids, **features})
        names = [o.name for o in self.embedding.get_outputs()]
        # inputs_embeds and any other embedding output the decoder takes (DeepStack's)
        feeds = {n: v for n, v in zip(names, values, strict=True) if n in self.decoder_inputs}
        if "token_type_ids" in self.decoder_inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids) if types is None else types
        return self._run_decoder(feeds, mask, positions, cache)

    def encoder_features(self, given: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """The embedding graph's inputs but ``input_ids``, by name: the encoder graphs' outputs
        (``image_features``, ``audio_features``...), each graph run where ``given`` holds its
        inputs (the outputs of the others empty), and what the processor gives the embedding
        itself (empty where ``given`` lacks it)."""
        inputs = self.embedding.get_inputs()
        features = {i.name: empty_input(i) for i in inputs if i.name != "input_ids"}
        for session in self.encoders.values():
            inputs = session.get_inputs()
            if given is None or any(i.name not in given for i in inputs):
                continue
            values = session.run(None, {i.name: as_input(i, given[i.name]) for i in inputs})
            features.update(zip([o.name for o in session.get_outputs()], values, strict=True))
        for i in self._given_embedding_inputs():
            if given is not None and i.name in given:
                features[i.name] = as_input(i, given[i.name])
        return features

    def _run_decoder(self, feeds, mask, positions, cache):
        feeds = dict(feeds, attention_mask=mask, position_ids=positions, **cache)
        outputs = dict(zip(self.output_names, self.session.run(None, feeds), strict=True))
        present = {
            name.replace("present.", "past_key_values."): value
            for name, value in outputs.items()
            if name.startswith("present.")
        }
        return outputs["logits"], present
