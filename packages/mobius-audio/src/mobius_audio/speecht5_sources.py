"""The source recogniser of SpeechT5's HiFi-GAN checkpoints as the hub holds them.

``microsoft/speecht5_hifigan``'s ``config.json`` says ``"model_type": "hifigan"``,
a type transformers renamed ``speecht5_hifigan`` and its AutoConfig no longer
reads. A model directory whose ``architectures`` is ``SpeechT5HifiGan`` is read
here with ``SpeechT5HifiGanConfig`` itself and built as ``speecht5_hifigan``; any
other directory is left to core's reader.
"""

from __future__ import annotations

from pathlib import Path

from mobius.errors import ConfigError, MobiusError
from mobius.source import ModelSource, one_line, quiet_transformers, read_json

ARCHITECTURE = "SpeechT5HifiGan"
MODEL_TYPE = "speecht5_hifigan"


def recognise(path: Path, options, registry) -> ModelSource | None:
    """A :class:`~mobius.source.ModelSource` for a SpeechT5 HiFi-GAN directory, else None."""
    if not (path.is_dir() and (path / "config.json").is_file()):
        return None
    try:
        raw = read_json(path / "config.json")
    except MobiusError:
        return None  # not a HiFi-GAN's: core's reader names what is wrong with it
    architectures = raw.get("architectures")
    if not isinstance(architectures, list) or ARCHITECTURE not in architectures:
        return None
    if raw.get("model_type") == MODEL_TYPE or options.model_type is not None:
        return None  # transformers reads it, or the user chose: core's reader
    from transformers import SpeechT5HifiGanConfig

    from mobius.weights import open_checkpoint

    try:
        with quiet_transformers():
            hf_config = SpeechT5HifiGanConfig.from_pretrained(path, trust_remote_code=False)
    except Exception as exc:  # transformers' own validation of the fields
        raise ConfigError(f"invalid config in {path}: {one_line(exc)}") from exc
    dtype = raw.get("torch_dtype") or raw.get("dtype")
    return ModelSource(
        path=path,
        entry=registry.get(MODEL_TYPE),
        hf_config=hf_config,
        checkpoint=lambda: open_checkpoint(path, allow_pickle=options.allow_pickle),
        source_dir=path,
        stored_dtype=dtype if isinstance(dtype, str) else None,
    )
