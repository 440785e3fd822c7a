"""Granite Speech checkpoints with their LoRA adapter: merged into the text decoder at build time.

ibm-granite/granite-speech-3.3-2b and -8b set ``has_lora_adapter`` and keep a PEFT LoRA
adapter for the text decoder beside the model (``adapter_config.json``,
``adapter_model.safetensors``). transformers loads it whenever ``adapter_config.json`` is
there and turns it on only when audio is given (``GraniteSpeechForConditionalGeneration.generate``).
A speech package is run with audio, so :func:`recognise` builds such a directory with the
adapter merged into the decoder's weights (:func:`mobius.lora.merge_lora`), and the
package keeps :data:`mobius.lora.MERGE_RECORD` to say so: the Granite runner then refuses
text-only prompts, which transformers answers with the adapter off
(:class:`mobius_audio.granite_speech_features.GraniteSpeechInputs`).

Adapter layouts: peft's names for the hub's module tree (``language_model.model.layers.*``),
for transformers 5's (``model.language_model.layers.*``), and for the text decoder alone
(``model.layers.*``); each merges into either checkpoint layout. ``--part text`` (the text
decoder alone, for text-only prompts) builds the base decoder: the adapter is not merged. ``has_lora_adapter`` without
the adapter's files is a one-line error naming them; :func:`hub_files` fetches
``adapter_config.json``, which a hub id's first download does not (its safetensors come
with the model's).
"""

from __future__ import annotations

from pathlib import Path

from mobius.errors import ConfigError, MobiusError
from mobius.lora import ADAPTER_CONFIG, MERGE_RECORD, LoraAdapter, merge_lora
from mobius.source import ModelSource, model_source, read_json
from mobius_audio.models.granite_speech import GraniteSpeechForConditionalGeneration

MODEL_TYPE = "granite_speech"
#: The types whose adapter is merged: Granite Speech and its variants (the same module tree).
MODEL_TYPES = (MODEL_TYPE, "granite_speech_plus")
#: The adapter's names for a text decoder trained alone, to the hub's module tree.
DECODER_ALONE = {"model.layers.": "language_model.model.layers."}


def has_adapter(path: Path) -> bool:
    """Whether ``path`` is a Granite Speech directory whose adapter a build merges: its
    config sets ``has_lora_adapter``, or (as transformers loads it) the adapter is there."""
    if not (path.is_dir() and (path / "config.json").is_file()):
        return False
    try:
        config = read_json(path / "config.json")
    except MobiusError:
        return False  # not readable: core's reader names what is wrong with it
    if config.get("model_type") not in MODEL_TYPES:
        return False
    flag = config.get("has_lora_adapter", False)
    if not isinstance(flag, bool):
        raise ConfigError(f"{MODEL_TYPE}: has_lora_adapter is {flag!r}, not true or false")
    return flag or (path / ADAPTER_CONFIG).is_file()


def recognise(path: Path, options, registry) -> ModelSource | None:
    """Core's model source for a Granite Speech directory with an adapter, its checkpoint
    merged with the adapter; None for any other directory (core's reader)."""
    if options.model_type not in (None, *MODEL_TYPES) or not has_adapter(path):
        return None
    if options.plugin.get("part", "all") != "all":
        return None  # the decoder alone (mobius-vision's --part text) is the text-only one
    source = model_source(path, registry, options)
    if not options.load_weights:
        return source  # the graphs do not depend on the adapter
    try:
        adapter = LoraAdapter.read(path)
    except MobiusError as exc:
        raise type(exc)(f"{MODEL_TYPE} with has_lora_adapter: {exc}") from None
    checkpoint = source.checkpoint
    source.checkpoint = lambda: merge_lora(
        checkpoint(),
        adapter,
        renames=GraniteSpeechForConditionalGeneration.renames,
        adapter_renames=DECODER_ALONE,
    )
    source.text_files[MERGE_RECORD] = adapter.record_json()
    return source


def hub_files(snapshot: Path, allow_pickle: bool) -> tuple[list[str], list[str]] | None:
    """For a hub Granite Speech snapshot with ``has_lora_adapter``: fetch ``adapter_config.json``."""
    if (snapshot / ADAPTER_CONFIG).is_file() or not has_adapter(snapshot):
        return None
    return [ADAPTER_CONFIG], []
