"""HuBERT: the wav2vec2 encoder under the ``hubert.`` prefix; the projection's LayerNorm is optional."""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError
from mobius_audio.models.wav2vec2 import UTTERANCE_HEADS, Wav2Vec2Config, Wav2Vec2ForCTC


class HubertConfig(Wav2Vec2Config):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "conv_pos_batch_norm", False):
            raise ConfigError("hubert conv_pos_batch_norm is not built")
        return super().hf_fields(hf_config)


class HubertForCTC(Wav2Vec2ForCTC):
    config_class = HubertConfig
    base_model_prefix = "hubert"
    heads = UTTERANCE_HEADS


MODEL_TYPES = {"hubert": HubertForCTC}
