"""A built vision–language package in ONNX Runtime, driven one step at a time.

Core's :class:`~mobius.multimodal.OnnxMultimodalDecoder` over the folders a
vision–language package holds (``vision/`` always; ``audio/`` where the package hears:
:mod:`mobius_vision.tasks.audio_vision_language`). The runner (:mod:`mobius_vision.runner`)
and the parity kit (:mod:`mobius_vision.testing`) share this class.
"""

from __future__ import annotations

from mobius.multimodal import OnnxMultimodalDecoder, cpu_session
from mobius_vision.tasks.audio_vision_language import AUDIO_INPUTS

__all__ = ["OnnxVisionLanguage", "cpu_session"]


class OnnxVisionLanguage(OnnxMultimodalDecoder):
    """A built VL package (``--form single`` or ``split``) driven step by step."""

    ENCODERS = ("vision", "audio")

    @property
    def vision(self):
        """The split form's vision graph (None in the single form)."""
        return self.encoders.get("vision")

    @property
    def image_inputs(self) -> list:
        """The graph inputs that take the processor's image (and audio) outputs."""
        return self.encoder_inputs

    def image_features(self, vision):
        """The embedding graph's inputs but ``input_ids`` (:meth:`encoder_features`)."""
        return self.encoder_features(vision)

    @property
    def audio_names(self) -> list[str]:
        """The inputs of the audio contract (:mod:`mobius_vision.tasks.audio_vision_language`)
        the package takes: none for a package that does not hear."""
        return [i.name for i in self.image_inputs if i.name in AUDIO_INPUTS]
