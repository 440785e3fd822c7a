"""Qwen3-Omni's thinker: Qwen3-VL-MoE (its tower with DeepStack, its MoE decoder) and an audio tower.

``Qwen3OmniMoeThinkerForConditionalGeneration`` reads images and audio and writes text.
Its vision tower is Qwen3-VL's, with the DeepStack mergers under ``merger_list`` in the
checkpoint; its text decoder (``qwen3_omni_moe_text``) is Qwen3-VL-MoE's (interleaved
M-RoPE, experts renormalised); its audio encoder is :mod:`._qwen3_omni_audio`. Image and
audio features replace their placeholders in order, the DeepStack levels are added at the
image tokens; positions are the model's 3-D rope indices (audio tokens count as text).
The contract is :mod:`mobius_vision.tasks.audio_vision_language`.

The hub's ``qwen3_omni_moe`` checkpoints hold the thinker under ``thinker.`` beside the
talker and code2wav (speech output): the build makes the thinker alone and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mobius.errors import ConfigError
from mobius.weights import DerivedTensor
from mobius_vision.models._omni import (
    HearingConfig,
    HearingMixin,
    WholeCheckpointMixin,
    WholeConfig,
)
from mobius_vision.models._qwen3_omni_audio import Qwen3OmniMoeAudioConfig, Qwen3OmniMoeAudioEncoder
from mobius_vision.models.qwen2_5_omni import Qwen2_5OmniThinkerForConditionalGeneration
from mobius_vision.models.qwen3_vl_moe import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration


@dataclass
class Qwen3OmniMoeThinkerConfig(HearingConfig, Qwen3VLMoeConfig):
    audio_config_class = Qwen3OmniMoeAudioConfig
    audio: Qwen3OmniMoeAudioConfig | None = None
    audio_token_id: int = 0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # the decoder renormalises the experts' weights, as Qwen3-VL-MoE's always does
        if getattr(hf_config.text_config, "norm_topk_prob", True) is not True:
            raise ConfigError(
                f"{hf_config.model_type}: text_config.norm_topk_prob false is not built yet"
            )
        return super().hf_fields(hf_config)


@dataclass
class Qwen3OmniMoeConfig(WholeConfig, Qwen3OmniMoeThinkerConfig):
    """A whole Qwen3-Omni checkpoint's config: its ``thinker_config`` is what is built."""

    left_out = (
        "the thinker is built (text output); the talker and code2wav (speech output) are not "
        "built yet and their weights are ignored"
    )


#: The Omni mergers' names (Qwen2.5-VL's) and Qwen3-VL's for the same layers.
MERGER_NAMES = {"ln_q.": "norm.", "mlp.0.": "linear_fc1.", "mlp.2.": "linear_fc2."}
_MERGER = re.compile(
    r"^(vision_tower\.(?:merger|deepstack_merger_list\.\d+)\.)(ln_q\.|mlp\.[02]\.)"
)
_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def merger_names(weights: dict) -> dict:
    """The Omni mergers' tensors under Qwen3-VL's merger names (:data:`MERGER_NAMES`)."""
    renamed = {}
    for name, tensor in weights.items():
        match = _MERGER.match(name)
        if match:
            head, old = match.groups()
            name = head + MERGER_NAMES[old] + name[match.end() :]
        renamed[name] = tensor
    return renamed


def stacked_experts(weights: dict) -> dict:
    """Per-expert ``experts.{e}.gate_proj/up_proj/down_proj`` (the hub's layout) as
    transformers' fused ``experts.gate_up_proj [experts, 2 * inner, hidden]`` (gate rows
    first) and ``experts.down_proj [experts, hidden, inner]``."""
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    rest = {}
    for name, tensor in weights.items():
        match = _EXPERT.match(name)
        if match is None:
            rest[name] = tensor
            continue
        prefix, expert, kind = match.groups()
        groups.setdefault(prefix, {}).setdefault(int(expert), {})[kind] = tensor
    for prefix, experts in groups.items():
        order = [experts[e] for e in sorted(experts)]
        if sorted(experts) != list(range(len(order))) or any(len(e) != 3 for e in order):
            raise ConfigError(f"{prefix}: the checkpoint's experts are incomplete")
        gate = order[0]["gate_proj"]
        inner, hidden = gate.shape

        def gate_up(order=order):
            return np.stack(
                [np.concatenate([e["gate_proj"].numpy(), e["up_proj"].numpy()]) for e in order]
            )

        def down(order=order):
            return np.stack([e["down_proj"].numpy() for e in order])

        shape = (len(order), 2 * inner, hidden)
        rest[f"{prefix}.gate_up_proj"] = DerivedTensor(gate_up, shape, gate.dtype)
        rest[f"{prefix}.down_proj"] = DerivedTensor(down, (len(order), hidden, inner), gate.dtype)
    return rest


class Qwen3OmniMoeThinkerForConditionalGeneration(HearingMixin, Qwen3VLMoeForConditionalGeneration):
    """Qwen3-VL-MoE with ``audio_tower`` (see the module docstring)."""

    config_class = Qwen3OmniMoeThinkerConfig
    audio_tower_class = Qwen3OmniMoeAudioEncoder
    #: Qwen2.5-Omni's layouts, the DeepStack mergers under their Qwen3-VL name.
    renames: ClassVar[dict[str, str]] = {
        "model.visual.merger_list.": "vision_tower.deepstack_merger_list.",
        "visual.merger_list.": "vision_tower.deepstack_merger_list.",
        **Qwen2_5OmniThinkerForConditionalGeneration.renames,
    }

    def sanitize(self, weights: dict) -> dict:
        return merger_names(super().sanitize(stacked_experts(weights)))


class Qwen3OmniMoeForConditionalGeneration(
    WholeCheckpointMixin, Qwen3OmniMoeThinkerForConditionalGeneration
):
    """A whole Qwen3-Omni checkpoint: its thinker (``thinker.``) is built; the talker and
    code2wav (speech output) are left out, and the build says so."""

    config_class = Qwen3OmniMoeConfig
    speech_prefixes = ("talker", "code2wav")


MODEL_TYPES = {
    "qwen3_omni_moe_thinker": Qwen3OmniMoeThinkerForConditionalGeneration,
    "qwen3_omni_moe": Qwen3OmniMoeForConditionalGeneration,
}
