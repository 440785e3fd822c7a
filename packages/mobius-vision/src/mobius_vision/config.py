"""The configs vision families share: a vision encoder's, and a vision–language model's.

:class:`VisionConfig` is what every vision encoder reads (the input image and the
head to build, ``mobius build --head``); :class:`VisionLanguageConfig` composes a
vision tower's config and a text decoder's, each read by the family the registry
holds for its type, and the package layout (``mobius build --form``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

from mobius.config import first_of
from mobius.errors import ConfigError

#: Heads a vision encoder build can add to its features (``mobius build --head``).
VISION_HEADS = ("none", "image-classification")


def image_size_pair(value: Any) -> tuple[int, int]:
    """``(height, width)`` from an HF ``image_size`` (an int, or a pair)."""
    if isinstance(value, (list, tuple)):
        height, width = value
        return int(height), int(width)
    return int(value), int(value)


@dataclass
class VisionConfig:
    """What every vision encoder family shares: the input image and the head to build.

    ``head`` is one of :data:`VISION_HEADS`. Families subclass this and extend
    :meth:`hf_fields` with their own sizes.
    """

    model_type: str
    image_size: tuple[int, int]
    num_channels: int = 3
    num_labels: int = 2
    head: str = "none"
    #: The checkpoint's architecture class names (which heads its weights have).
    architectures: tuple[str, ...] = ()

    def require_no_head(self) -> None:
        """Refuse a classifier head, for the towers transformers ships without one."""
        if self.head != "none":
            raise ConfigError(
                f"{self.model_type} has no classifier head; build it with --head none"
            )

    @classmethod
    def from_hf(cls, hf_config: Any) -> VisionConfig:
        """Normalise a transformers config object (the head stays ``"none"``)."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; subclasses add to this dict."""
        return dict(
            model_type=hf_config.model_type,
            image_size=image_size_pair(first_of(hf_config, "image_size", default=224)),
            num_channels=int(first_of(hf_config, "num_channels", default=3)),
            num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
            architectures=tuple(getattr(hf_config, "architectures", None) or ()),
        )


#: Text-config fields a causal LM's own output head applies, and the values that turn them off.
TEXT_HEAD_FIELDS = {"logit_scale": 1.0, "final_logit_softcapping": None, "logits_scaling": 1.0}

#: The package layouts of a vision–language build (``--form``).
VISION_LANGUAGE_FORMS = ("split", "single")


@dataclass
class VisionLanguageConfig:
    """A vision–language model: the configs of its vision tower and text decoder, composed.

    ``vision`` and ``text`` are the normalised configs of whatever the registry
    holds for ``vision_config.model_type`` and ``text_config.model_type`` (read by
    those families' own config classes), so a LLaVA over Qwen2 gets mobius-text's
    Qwen2. ``form`` is one of :data:`VISION_LANGUAGE_FORMS`. Families subclass this
    and extend :meth:`hf_fields` with their projector's settings.
    """

    model_type: str
    vision: Any
    text: Any
    image_token_id: int
    form: str = "split"

    @classmethod
    def from_hf(cls, hf_config: Any) -> VisionLanguageConfig:
        """Normalise a transformers config object; the sub-configs go through the registry."""
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The constructor arguments read from ``hf_config``; subclasses add to this dict."""
        return dict(
            model_type=hf_config.model_type,
            vision=composed_config(hf_config.vision_config),
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(first_of(hf_config, "image_token_id", "image_token_index")),
        )

    #: Output-head fields of :data:`TEXT_HEAD_FIELDS` that the family's transformers class
    #: applies itself (Gemma 3 and PaliGemma soft-cap their logits).
    text_head_applied: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def text_hf_config(cls, hf_config: Any) -> Any:
        """The transformers config the text decoder is built from.

        transformers' VL classes put a bare ``lm_head`` on the text model, tied or
        not by the top-level ``tie_word_embeddings``, so the scaling and capping a
        text-only causal LM applies in its head are turned off, except those in
        :attr:`text_head_applied`.
        """
        text = copy.deepcopy(hf_config.text_config)
        if getattr(hf_config, "tie_word_embeddings", None) is not None:
            text.tie_word_embeddings = hf_config.tie_word_embeddings  # the VL class ties by its own
        for name, neutral in TEXT_HEAD_FIELDS.items():
            if name not in cls.text_head_applied and getattr(text, name, None) is not None:
                setattr(text, name, neutral)
        return text

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    # onnxruntime-genai's generator (mobius_vision.genai): what a family adds to its config.

    def genai_model_fields(self, source: dict[str, Any]) -> dict[str, Any]:
        """Fields of ``genai_config.json``'s ``model`` section only this family's generator class reads.

        ``source`` is the checkpoint's ``config.json`` (empty when it has none).
        """
        return {}

    def genai_processor_config(self, preprocessor: dict[str, Any]) -> dict[str, Any]:
        """The generator's ``processor_config.json`` from the source's ``preprocessor_config.json``.

        Raises :class:`~mobius.genai.GenAIUnsupportedError` where the generator's image
        preprocessing would not compute what transformers' image processor computes: a
        family overrides this where it does (Qwen2-VL, and so Qwen2.5-VL).
        """
        from mobius.genai import GenAIUnsupportedError

        raise GenAIUnsupportedError(
            f"onnxruntime-genai's image preprocessing for {self.model_type!r} does not "
            "compute what transformers' image processor computes "
            "(only Qwen2-VL's and Qwen2.5-VL's do)"
        )

    def genai_audio_processor_config(self, preprocessor: dict[str, Any]) -> dict[str, Any]:
        """The generator's ``audio_processor_config.json`` (its speech feature extraction),
        for a package with an ``audio/`` graph, from the source's processor settings.

        Raises :class:`~mobius.genai.GenAIUnsupportedError` where the generator has no
        feature extraction for the family: a family overrides this where it does.
        """
        from mobius.genai import GenAIUnsupportedError

        raise GenAIUnsupportedError(
            f"onnxruntime-genai has no audio feature extraction for {self.model_type!r}"
        )


def composed_config(hf_sub_config: Any) -> Any:
    """The normalised config of a sub-model, by the family the registry holds for its type."""
    from mobius import registry

    return registry.get(hf_sub_config.model_type).config_class().from_hf(hf_sub_config)
