"""The audio codecs' feature extractors in numpy: ``DacFeatureExtractor``'s and
``EncodecFeatureExtractor``'s padding.

Both (called with ``padding=True``, their default) pad every clip with
``padding_value`` to the longest clip of the batch on the ``padding_side`` of their
config, and return ``input_values`` float32 ``[batch, channels, samples]`` with
``padding_mask`` int32 ``[batch, samples]`` (1 real, 0 padding). DAC rounds the
length up to a multiple of its ``hop_length`` and is mono; EnCodec takes mono or
stereo (``feature_size`` 2: each clip ``[2, samples]``). :class:`CodecFeatures` does
the same from the package's ``preprocessor_config.json`` without transformers.
EnCodec with overlapping chunks (``chunk_length_s`` and ``overlap``: the 48 kHz
model) pads to ``(ceil(longest / stride) - 1) * stride + chunk_length`` samples
instead, whole chunks every ``stride`` samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mobius.errors import MobiusError


def _setting(config: dict, name: str, kind: type | tuple, default: Any, check) -> Any:
    """``config[name]`` when it is a ``kind`` that passes ``check``; a one-line error otherwise."""
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, kind) or not check(value):
        raise MobiusError(f"preprocessor_config.json's {name} {value!r} is not valid")
    return value


@dataclass(frozen=True)
class CodecFeatures:
    """A codec feature extractor's settings and its padding."""

    sampling_rate: int
    channels: int = 1
    multiple: int = 1  # the padded length is a multiple of it (DAC: its hop length)
    padding_value: float = 0.0
    padding_side: str = "right"
    chunk_length: int = 0  # EnCodec's chunks in samples (0: none)
    chunk_stride: int = 0

    @classmethod
    def from_config(cls, config: dict) -> CodecFeatures:
        """Read a ``preprocessor_config.json`` (a stranger's file: every value checked)."""
        kind = config.get("feature_extractor_type")
        if kind not in ("DacFeatureExtractor", "EncodecFeatureExtractor"):
            raise MobiusError(
                f"preprocessor_config.json is a {kind!r}, not a DacFeatureExtractor or an "
                "EncodecFeatureExtractor"
            )
        channels = _setting(config, "feature_size", int, 1, lambda v: v in (1, 2))
        multiple = 1
        if kind == "DacFeatureExtractor":
            if channels != 1:
                raise MobiusError(
                    "preprocessor_config.json's feature_size: DAC takes mono audio (1)"
                )
            multiple = _setting(config, "hop_length", int, 512, lambda v: v > 0)
        rate = _setting(config, "sampling_rate", int, 16000, lambda v: v > 0)
        chunk_length = chunk_stride = 0
        if kind == "EncodecFeatureExtractor" and config.get("chunk_length_s") is not None:
            seconds = _setting(config, "chunk_length_s", (int, float), None, lambda v: v > 0)
            overlap = _setting(config, "overlap", (int, float), None, lambda v: 0 <= v < 1)
            chunk_length = int(seconds * rate)  # as transformers' chunk_length, chunk_stride
            chunk_stride = max(1, int((1.0 - overlap) * chunk_length))
            if chunk_length < 1:
                raise MobiusError(
                    f"preprocessor_config.json's chunk_length_s {seconds!r} is not valid"
                )
        return cls(
            sampling_rate=rate,
            channels=channels,
            multiple=multiple,
            padding_value=float(_setting(config, "padding_value", (int, float), 0.0, np.isfinite)),
            padding_side=_setting(
                config, "padding_side", str, "right", lambda v: v in ("left", "right")
            ),
            chunk_length=chunk_length,
            chunk_stride=chunk_stride,
        )

    def padded_length(self, longest: int) -> int:
        """The batch's padded length for its longest clip."""
        if self.chunk_length:
            steps = -(-longest // self.chunk_stride)
            return (steps - 1) * self.chunk_stride + self.chunk_length
        return -(-longest // self.multiple) * self.multiple

    def __call__(self, clips: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``input_values`` ``[batch, channels, samples]`` and ``padding_mask`` ``[batch, samples]``.

        Each clip is ``[samples]`` (mono) or ``[channels, samples]``.
        """
        shape = "[samples]" if self.channels == 1 else f"[{self.channels}, samples]"
        clips = [np.asarray(clip, dtype=np.float32).reshape(self.channels, -1) if
                 np.ndim(clip) == (1 if self.channels == 1 else 2) else None for clip in clips]  # fmt: skip
        if not clips or any(clip is None or clip.size == 0 for clip in clips):
            raise MobiusError(f"the codec takes one or more non-empty clips of {shape}")
        longest = max(clip.shape[1] for clip in clips)
        samples = self.padded_length(longest)
        values = np.full((len(clips), self.channels, samples), self.padding_value, np.float32)
        mask = np.zeros((len(clips), samples), dtype=np.int32)
        for row, clip in enumerate(clips):
            length = clip.shape[1]
            start = samples - length if self.padding_side == "left" else 0
            values[row, :, start : start + length] = clip
            mask[row, start : start + length] = 1
        return {"input_values": values, "padding_mask": mask}
