"""The size budget of the constants a build precomputes from config values.

A graph bakes some tables in as initializers: rotary cos/sin caches, sinusoidal
position tables. Their size follows config numbers (``max_position_embeddings``,
a sample size), so a small hostile config could ask for many gigabytes. Every
such table is checked here, from its shape, before it is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mobius.errors import ConfigError

#: The most bytes one precomputed constant may take. The largest a real checkpoint needs is a
#: 10M-token context's rotary table: 10,485,760 positions x 64 frequencies in float32, 2.5 GiB.
CONSTANT_BUDGET = 3 << 30


def check_constant_size(shape: Sequence[int], itemsize: int, what: str, key: str) -> None:
    """Refuse a constant of ``shape`` (``itemsize`` bytes an entry) over :data:`CONSTANT_BUDGET`.

    ``what`` names the table and ``key`` the config field its size comes from; both go
    into the one-line :class:`~mobius.errors.ConfigError`. Call it before allocating.
    """
    size = math.prod(int(n) for n in shape) * itemsize
    if size > CONSTANT_BUDGET:
        dims = " x ".join(str(int(n)) for n in shape)
        raise ConfigError(
            f"{key} asks for a {what} of {dims} entries ({size / (1 << 30):.1f} GiB): over "
            f"mobius's budget of {CONSTANT_BUDGET >> 30} GiB for one precomputed constant"
        )
