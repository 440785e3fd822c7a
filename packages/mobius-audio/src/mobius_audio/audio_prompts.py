"""Audio placeholders in a speech LLM's prompt: one per clip, expanded to its audio tokens."""

from __future__ import annotations

from mobius.errors import MobiusError


def check_placeholders(text: str, token: str, clips: int) -> None:
    """Refuse a prompt whose audio placeholders are not one per clip, in one line."""
    count = text.count(token)
    if count != clips:
        raise MobiusError(
            f"the prompt holds {count} {token} placeholder(s) for {clips} audio clip(s): "
            "put one per clip"
        )


def expand_placeholders(text: str, token: str, counts) -> str:
    """``text`` with its n-th ``token`` repeated ``counts[n]`` times (each clip's audio tokens),
    as transformers' processors expand it."""
    pieces = text.split(token)
    return pieces[0] + "".join(
        token * int(n) + piece for n, piece in zip(counts, pieces[1:], strict=True)
    )
