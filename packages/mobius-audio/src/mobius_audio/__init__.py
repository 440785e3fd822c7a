"""mobius-audio: audio models: speech-to-text and audio encoders.

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import. Each model
file in ``mobius_audio.models`` declares the HF ``model_type`` keys it builds in
a ``MODEL_TYPES`` table, next to the classes themselves.

``mobius_audio.transcribe(package_dir, audio, ...)`` runs a built speech-to-text
package (:func:`mobius_audio.generate.transcribe`; imported on first use);
``mobius_audio.transcribe_ctc(package_dir, audio)`` and
``mobius_audio.classify_audio(package_dir, audio, top=5)`` run audio encoders with a
CTC or classification head (:mod:`mobius_audio.encoders`);
``mobius_audio.classify_frames(package_dir, audio)`` and
``mobius_audio.speaker_embedding(package_dir, audio)`` those with a frame-classification
or x-vector head (:mod:`mobius_audio.speaker_heads`);
``mobius_audio.synthesize(package_dir, text, seed=0)`` speaks with a text-to-audio
package (VITS / MMS-TTS: :mod:`mobius_audio.tts`).
"""

from __future__ import annotations

from mobius.discovery import discover_model_types, register_model_types, registrations

__version__ = "0.1.0"

PACKAGE = "mobius-audio"

# Model files that failed to import: file name -> error. Their types are not registered.
LOAD_ERRORS: dict[str, str] = {}


def model_types() -> dict[str, type]:
    """Every ``model_type`` this package builds, mapped to its module class."""
    from mobius_audio import models

    return discover_model_types(models, LOAD_ERRORS)


def register(registry) -> None:
    """Register mobius-audio's slice: its model types, and its tasks, sources, options and runners."""
    from mobius_audio.plugin import register_slice

    table = registrations("mobius_audio", model_types)  # the index: no model file imported
    register_model_types(registry, PACKAGE, table, LOAD_ERRORS, "mobius_audio:verified.json")
    register_slice(registry)


def __getattr__(name: str):
    # transcribe is imported on first use: registering the package stays light.
    if name == "transcribe":
        from mobius_audio.generate import transcribe

        return transcribe
    if name in ("transcribe_ctc", "classify_audio"):  # audio encoders with a head
        from mobius_audio import encoders

        return getattr(encoders, name)
    if name in ("classify_frames", "speaker_embedding"):  # frame and x-vector heads
        from mobius_audio import speaker_heads

        return getattr(speaker_heads, name)
    if name == "synthesize":  # text-to-audio (VITS)
        from mobius_audio.tts import synthesize

        return synthesize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
