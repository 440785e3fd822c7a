"""Checks of a component's ``config.json`` values (a stranger's file) before a model uses them."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from mobius.errors import ConfigError


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def config_int(config: Any, name: str, default: Any = None, low: int = 1) -> int:
    """``config.name`` (``default`` when absent): an int, not a bool, of at least ``low``."""
    value = getattr(config, name, default)
    if not _is_int(value, low):
        bound = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ConfigError(f"{config.model_type} {name} must be {bound}, got {value!r}")
    return value


def config_ints(
    config: Any, name: str, default: Any, count: int | None = None, low: int = 1
) -> tuple[int, ...]:
    """``config.name``: a non-empty list of ints (``count`` of them if given), each >= ``low``."""
    values = getattr(config, name, default)
    if not isinstance(values, list | tuple) or not values or len(values) != (count or len(values)):
        many = f"{count} integers" if count else "integers"
        raise ConfigError(f"{config.model_type} {name} must list {many}, got {values!r}")
    for value in values:
        if not _is_int(value, low):
            raise ConfigError(
                f"{config.model_type} {name} holds {value!r}: not an integer >= {low}"
            )
    return tuple(values)


def config_float(config: Any, name: str, default: Any = None) -> float:
    """``config.name``: a positive number."""
    value = getattr(config, name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{config.model_type} {name} must be a positive number, got {value!r}")
    return float(value)


def _built(config: Any, name: str, value: Any, built: Collection) -> Any:
    if value not in built:
        raise ConfigError(
            f"{config.model_type} {name} {value!r} is not built by mobius; "
            f"it builds {sorted(built, key=str)}"
        )
    return value


def config_choice(config: Any, name: str, default: Any, built: Collection) -> Any:
    """``config.name`` when it is one of ``built``, else a ConfigError naming it and what is."""
    return _built(config, name, getattr(config, name, default), built)


def per_block(config: Any, name: str, default: Any, count: int, built: Collection) -> tuple:
    """``config.name``: one value for every block, or a list of ``count``; each one of ``built``."""
    values = getattr(config, name, default)
    if isinstance(values, str) or values is None:
        values = [values] * count
    if not isinstance(values, list | tuple) or len(values) != count:
        raise ConfigError(f"{config.model_type} {name} must give {count} values, got {values!r}")
    return tuple(_built(config, name, value, built) for value in values)
