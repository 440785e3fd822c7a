"""Qwen2.5-Omni's thinker: Qwen2.5-VL's tower, a Whisper-style audio encoder, an M-RoPE Qwen2.

``Qwen2_5OmniThinkerForConditionalGeneration`` reads images and audio and writes text.
Its vision tower is Qwen2.5-VL's (window attention, RMS norms, gated MLP), with the
query, key and value projections apart in the checkpoint (``attn.q``, ``attn.k``,
``attn.v``: fused here into the tower's ``attn.qkv``); its audio encoder is
:mod:`._qwen2_5_omni_audio`; its text decoder (``qwen2_5_omni_text``) is Qwen2-VL's.
Image and audio features replace their placeholders (``image_token_id``,
``audio_token_id``) in order; positions are the model's 3-D rope indices (audio tokens
count as text). The contract is :mod:`mobius_vision.tasks.audio_vision_language`.

The hub's ``qwen2_5_omni`` checkpoints hold the thinker under ``thinker.`` beside the
talker and the token2wav vocoder, which turn the text into speech: the build makes the
thinker alone (text output) and says so; the talker and token2wav are not built yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mobius.weights import DerivedTensor
from mobius_vision.models._omni import (
    HearingConfig,
    HearingMixin,
    WholeCheckpointMixin,
    WholeConfig,
)
from mobius_vision.models._qwen2_5_omni_audio import (
    Qwen2_5OmniAudioConfig,
    Qwen2_5OmniAudioEncoder,
)
from mobius_vision.models.qwen2_5_vl import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration


@dataclass
class Qwen2_5OmniThinkerConfig(HearingConfig, Qwen2_5_VLConfig):
    audio_config_class = Qwen2_5OmniAudioConfig
    audio: Qwen2_5OmniAudioConfig | None = None
    audio_token_id: int = 0


@dataclass
class Qwen2_5OmniConfig(WholeConfig, Qwen2_5OmniThinkerConfig):
    """A whole Qwen2.5-Omni checkpoint's config: its ``thinker_config`` is what is built."""

    left_out = (
        "the thinker is built (text output); the talker and token2wav (speech output) are "
        "not built yet and their weights are ignored"
    )


def fuse_qkv(weights: dict, prefix: str = "vision_tower.blocks.") -> dict:
    """The tower's ``attn.q``, ``attn.k`` and ``attn.v`` tensors as one ``attn.qkv`` (rows q, k, v)."""
    fused = dict(weights)
    for name in [n for n in weights if n.startswith(prefix) and ".attn.q." in n]:
        block, kind = name.split(".attn.q.")
        parts = [fused.pop(f"{block}.attn.{p}.{kind}") for p in "qkv"]
        rows = sum(part.shape[0] for part in parts)

        def concatenate(parts=parts):
            return np.concatenate([np.asarray(part.numpy()) for part in parts], axis=0)

        shape = (rows, *parts[0].shape[1:])
        fused[f"{block}.attn.qkv.{kind}"] = DerivedTensor(concatenate, shape, parts[0].dtype)
    return fused


class Qwen2_5OmniThinkerForConditionalGeneration(HearingMixin, Qwen2_5_VLForConditionalGeneration):
    """Qwen2.5-VL with ``audio_tower`` (see the module docstring)."""

    config_class = Qwen2_5OmniThinkerConfig
    audio_tower_class = Qwen2_5OmniAudioEncoder
    #: The thinker's checkpoint layouts (transformers 5's, and the hub's older one).
    renames: ClassVar[dict[str, str]] = {
        "model.language_model.": "language_model.model.",
        "model.visual.": "vision_tower.",
        "model.audio_tower.": "audio_tower.",
        "visual.": "vision_tower.",
        "audio_tower.": "audio_tower.",
        "model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    @property
    def ignored(self) -> tuple[str, ...]:
        # the clip start/end embeddings the encoder holds but never reads
        return (*super().ignored, "audio_tower.audio_bos_eos_token.*")

    def sanitize(self, weights: dict) -> dict:
        return fuse_qkv(super().sanitize(weights))


class Qwen2_5OmniForConditionalGeneration(
    WholeCheckpointMixin, Qwen2_5OmniThinkerForConditionalGeneration
):
    """A whole Qwen2.5-Omni checkpoint: its thinker (``thinker.``) is built; the talker and
    token2wav (speech output) are left out, and the build says so."""

    config_class = Qwen2_5OmniConfig
    speech_prefixes = ("talker", "token2wav")


MODEL_TYPES = {
    "qwen2_5_omni_thinker": Qwen2_5OmniThinkerForConditionalGeneration,
    "qwen2_5_omni": Qwen2_5OmniForConditionalGeneration,
}
