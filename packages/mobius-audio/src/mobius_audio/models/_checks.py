"""Checks of a checkpoint config's values (a stranger's file), shared by the model files."""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError


def positive_int(hf_config: Any, name: str) -> int:
    """``hf_config.name`` checked to be a positive int, else a ConfigError naming both."""
    value = getattr(hf_config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        kind = getattr(hf_config, "model_type", "config")
        raise ConfigError(f"{kind} {name} must be a positive integer, got {value!r}")
    return value
