"""``KyutaiSpeechToTextFeatureExtractor`` in numpy: EnCodec's padding, then silence around the clip.

The clips are padded to the longest with ``padding_value`` on the ``padding_side``
(:class:`mobius_audio.codec_features.CodecFeatures`), then every row gets
``int(audio_silence_prefix_seconds * sampling_rate)`` zeros before and
``int((audio_delay_seconds + 1.0) * sampling_rate)`` zeros after: the text stream
lags the audio by the delay, and the extra second lets the last words out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mobius.errors import MobiusError
from mobius_audio.codec_features import CodecFeatures, _setting

#: The most LM steps (audio frames: 43 min at 12.5 a second) a package decodes: its rotary
#: table's rows. transformers computes any position; the checkpoint's
#: ``max_position_embeddings`` (750) is not a limit of its streaming decoder.
MAX_STEPS = 1 << 15


@dataclass(frozen=True)
class KyutaiFeatures:
    """The extractor's padding, read from a ``preprocessor_config.json``."""

    padding: CodecFeatures
    silence_prefix_seconds: float = 0.0
    delay_seconds: float = 0.0

    @property
    def sampling_rate(self) -> int:
        return self.padding.sampling_rate

    @classmethod
    def from_config(cls, config: dict) -> KyutaiFeatures:
        """Every value checked (a stranger's file)."""
        kind = config.get("feature_extractor_type")
        if kind != "KyutaiSpeechToTextFeatureExtractor":
            raise MobiusError(
                f"preprocessor_config.json is a {kind!r}, not a KyutaiSpeechToTextFeatureExtractor"
            )
        if config.get("chunk_length_s") is not None:
            raise MobiusError("the extractor's overlapping chunks (chunk_length_s) are not built")
        seconds = (int, float)
        padding = CodecFeatures(
            sampling_rate=_setting(config, "sampling_rate", int, 24000, lambda v: v > 0),
            channels=_setting(config, "feature_size", int, 1, lambda v: v in (1, 2)),
            padding_value=float(_setting(config, "padding_value", seconds, 0.0, np.isfinite)),
            padding_side=_setting(
                config, "padding_side", str, "right", lambda v: v in ("left", "right")
            ),
        )
        in_range = lambda v: 0 <= v <= 60  # noqa: E731
        return cls(
            padding=padding,
            silence_prefix_seconds=float(
                _setting(config, "audio_silence_prefix_seconds", seconds, 0.0, in_range)
            ),
            delay_seconds=float(_setting(config, "audio_delay_seconds", seconds, 0.0, in_range)),
        )

    def __call__(self, clips: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``input_values`` float32 ``[batch, channels, samples]`` and ``padding_mask`` ``[batch, samples]``."""
        padded = self.padding(clips)
        rate = self.sampling_rate
        left = int(self.silence_prefix_seconds * rate)
        right = int((self.delay_seconds + 1.0) * rate)
        return {
            "input_values": np.pad(padded["input_values"], ((0, 0), (0, 0), (left, right))),
            "padding_mask": np.pad(padded["padding_mask"], ((0, 0), (left, right))),
        }
