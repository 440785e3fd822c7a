"""Voxtral checkpoints keep their tokenizer, ``tekken.json``, in the package they build.

The hub's Voxtral (mistralai/Voxtral-Mini-3B-2507, Voxtral-Small-24B-2507) has no
``tokenizer.json``: its prompts come from mistral-common's Tekken tokenizer, whose one
file is ``tekken.json`` (vocabulary, special tokens and the audio settings: sample
rate, chunk length, audio tokens a second). :func:`recognise` reads a Voxtral model
directory with core's reader and adds that file to what the package keeps, for
``mobius generate`` (:mod:`mobius_audio.voxtral_generate`); :func:`hub_files` fetches it
along with a hub id's first download, whose patterns do not name it.

A directory without ``tekken.json`` still builds (graph parity needs no tokenizer), with a
warning; generating from its package is then a one-line error.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from mobius.errors import MobiusError
from mobius.safe_paths import join_inside
from mobius.source import ModelSource, model_source, read_json

logger = logging.getLogger(__name__)

MODEL_TYPE = "voxtral"
#: mistral-common's tokenizer file; a fixed name, never one read from the checkpoint.
TEKKEN = "tekken.json"


def _is_voxtral(path: Path) -> bool:
    if not (path.is_dir() and (path / "config.json").is_file()):
        return False
    try:
        return read_json(path / "config.json").get("model_type") == MODEL_TYPE
    except MobiusError:
        return False  # not readable: core's reader names what is wrong with it


@dataclasses.dataclass
class VoxtralSource(ModelSource):
    """Core's model directory source, whose package also keeps ``tekken.json``."""

    def build(self, options, registry):
        package = super().build(options, registry)
        tekken = self.path / TEKKEN
        if tekken.is_file():  # copied into the package: never through a symlink out of it
            package.extra_files[TEKKEN] = join_inside(self.path, TEKKEN, source=self.path)
        else:
            logger.warning(
                "%s has no %s (mistral-common's tokenizer): the package builds, but "
                "`mobius generate` needs that file beside it",
                self.path,
                TEKKEN,
            )
        return package


def recognise(path: Path, options, registry) -> ModelSource | None:
    """A :class:`VoxtralSource` for a Voxtral model directory, else None (core's reader)."""
    if options.model_type not in (None, MODEL_TYPE) or not _is_voxtral(path):
        return None
    source = model_source(path, registry, options)
    return VoxtralSource(**{f.name: getattr(source, f.name) for f in dataclasses.fields(source)})


def hub_files(snapshot: Path, allow_pickle: bool) -> tuple[list[str], list[str]] | None:
    """For a hub Voxtral snapshot without ``tekken.json``: fetch it too; else None."""
    if not _is_voxtral(snapshot) or (snapshot / TEKKEN).is_file():
        return None
    return [TEKKEN], []
