"""Checks of a checkpoint config's values (a stranger's file), shared by the model files."""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError


def checked_int(value: Any, what: str, low: int = 1) -> int:
    """``value`` checked to be an int (not a bool) of at least ``low``, else a ConfigError
    naming ``what`` (the family and field, e.g. ``"bark coarse_acoustics num_layers"``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        bound = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ConfigError(f"{what} must be {bound}, got {value!r}")
    return value


def positive_int(hf_config: Any, name: str) -> int:
    """``hf_config.name`` checked to be a positive int, else a ConfigError naming both."""
    kind = getattr(hf_config, "model_type", "config")
    return checked_int(getattr(hf_config, name, None), f"{kind} {name}")
