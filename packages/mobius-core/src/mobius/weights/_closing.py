"""``with checkpoint: ...`` for the readers: leaving the block calls ``close()``."""

from __future__ import annotations

from typing import Self


class Closing:
    """Context-manager protocol for a class with a ``close()`` method."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
