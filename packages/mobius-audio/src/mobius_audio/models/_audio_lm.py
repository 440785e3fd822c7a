"""What every speech LLM shares: an audio tower and projector before a registered text decoder.

A speech LLM (Qwen2-Audio, Voxtral) is composed, never copied: its text decoder is the
causal LM mobius-text registers for ``text_config.model_type`` (Qwen2's, Llama's...),
built from the same config class a text-only build uses. The family adds the audio
tower and the projector, and says how their output becomes ``audio_features``
[audio tokens, text hidden]; the placeholder ids then take those rows in order
(:func:`mobius.components.merge_image_features`, whatever kind of input). Graphs follow
:mod:`mobius_audio.tasks_audio_language`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius import registry
from mobius.components import merge_image_features
from mobius.errors import ConfigError
from mobius.tasks import MultimodalDecoderModel


def text_decoder_config(hf_text_config: Any) -> Any:
    """The normalised config of the causal LM the registry holds for the text config's type."""
    entry = registry.get(hf_text_config.model_type)
    if entry.task != "causal-lm":
        raise ConfigError(
            f"text_config.model_type {hf_text_config.model_type} is a {entry.task} model, "
            "not a text decoder"
        )
    return entry.config_class().from_hf(hf_text_config)


def positive_int(config: Any, name: str, where: str) -> int:
    """``config.name`` checked to be a positive int (a checkpoint's config is a stranger's)."""
    value = getattr(config, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}.{name} is {value!r}, not a positive int")
    return value


@dataclass
class WhisperTowerConfig:
    """A Whisper-style audio tower's sizes, read from an ``audio_config`` (Qwen2-Audio's, Voxtral's:
    transformers maps Voxtral's ``hidden_size``... to the Whisper names read here)."""

    num_mel_bins: int
    hidden_size: int  # d_model
    encoder_layers: int
    encoder_heads: int
    encoder_ffn_dim: int
    max_source_positions: int
    act: str = "gelu"

    @classmethod
    def from_hf(cls, hf: Any) -> WhisperTowerConfig:
        where = "audio_config"
        fields = dict(
            num_mel_bins=positive_int(hf, "num_mel_bins", where),
            hidden_size=positive_int(hf, "d_model", where),
            encoder_layers=positive_int(hf, "encoder_layers", where),
            encoder_heads=positive_int(hf, "encoder_attention_heads", where),
            encoder_ffn_dim=positive_int(hf, "encoder_ffn_dim", where),
            max_source_positions=positive_int(hf, "max_source_positions", where),
        )
        if fields["hidden_size"] % fields["encoder_heads"]:
            raise ConfigError(
                f"audio_config.d_model {fields['hidden_size']} is not a multiple of "
                f"encoder_attention_heads {fields['encoder_heads']}"
            )
        act = getattr(hf, "activation_function", "gelu")
        if not isinstance(act, str):
            raise ConfigError(f"audio_config.activation_function is {act!r}, not a name")
        # scale_embedding: both families compute embed_scale and never apply it.
        return cls(**fields, act=act)


@dataclass
class AudioLanguageConfig:
    """A speech LLM: its audio tower's config (the family's), its text decoder's, the placeholder.

    Families subclass this, set :attr:`audio_config_class` and extend :meth:`hf_fields`.
    """

    model_type: str
    audio: Any
    text: Any
    audio_token_id: int

    audio_config_class: ClassVar[type]

    @classmethod
    def from_hf(cls, hf_config: Any) -> AudioLanguageConfig:
        """Normalise a transformers config object; the text config goes through the registry."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        token = getattr(hf_config, "audio_token_id", None)
        if token is None:
            token = getattr(hf_config, "audio_token_index", None)
        if not isinstance(token, int) or isinstance(token, bool) or token < 0:
            raise ConfigError(f"{hf_config.model_type}: audio_token_id is {token!r}")
        for name in ("audio_config", "text_config"):
            if getattr(hf_config, name, None) is None:
                raise ConfigError(f"{hf_config.model_type}: config.json has no {name}")
        text = copy.deepcopy(hf_config.text_config)
        # transformers ties the head by the top-level flag only (absent: untied), whatever
        # the text config says
        text.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        return dict(
            model_type=hf_config.model_type,
            audio=cls.audio_config_class.from_hf(hf_config.audio_config),
            text=text_decoder_config(text),
            audio_token_id=token,
        )

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size


class AudioLanguageModel(MultimodalDecoderModel):
    """``audio_tower``, ``multi_modal_projector`` and ``language_model``, composed.

    Subclasses set ``config_class``, build the tower and projector and compute
    :meth:`audio_features`.
    """

    task = "audio-language"
    #: Checkpoint key prefixes and the module paths they map to, first match wins: the hub's
    #: layout (``audio_tower.``, ``language_model.model.``...) is the module tree's own;
    #: transformers 5 saves ``model.audio_tower.``, ``model.language_model.``, ``lm_head.``.
    renames: ClassVar[dict[str, str]] = {
        "model.audio_tower.": "audio_tower.",
        "model.multi_modal_projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: AudioLanguageConfig) -> None:
        super().__init__()
        self.config = config
        self.audio_tower = self.make_audio_tower(config)
        self.multi_modal_projector = self.make_projector(config)
        entry = registry.get(config.text.model_type)
        self.language_model = entry.module_class()(config.text)

    def make_audio_tower(self, config) -> nn.Module:
        raise NotImplementedError

    def make_projector(self, config) -> nn.Module:
        raise NotImplementedError

    # -- the audio graph (mobius_audio.tasks_audio_language) --------------------------------

    def audio_inputs(self, dtype) -> list[tuple]:
        """The audio graph's inputs ``(name, dtype, shape)``."""
        import onnx_ir as ir

        mels = self.config.audio.num_mel_bins
        return [
            ("input_features", dtype, ["num_audios", mels, "audio_frames"]),
            ("feature_attention_mask", ir.DataType.INT64, ["num_audios", "audio_frames"]),
        ]

    def audio_outputs(self) -> list[tuple]:
        return [("audio_features", ["num_audio_tokens", self.config.text.hidden_size])]

    def audio_modules(self) -> list[nn.Module]:
        return [self.audio_tower, self.multi_modal_projector]

    def audio_features(self, op, *audio_inputs):
        """``[audio tokens, text hidden]``: every clip's tokens in order."""
        raise NotImplementedError

    # -- the embedding and decoder graphs -------------------------------------------------

    def embed(self, op, input_ids, audio_features):
        """Token embeddings with the audio placeholders replaced by ``audio_features``."""
        embeds = self.token_embeddings(op, input_ids)  # [batch, sequence, hidden]
        return merge_image_features(
            op, embeds, input_ids, audio_features, self.config.audio_token_id
        )
