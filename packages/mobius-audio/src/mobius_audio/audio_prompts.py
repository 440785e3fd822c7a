"""Audio placeholders in a speech LLM's prompt: one per clip, expanded to its audio tokens."""

from __future__ import annotations

import numpy as np

from mobius.chat_template import render_chat_template
from mobius.errors import MobiusError


def check_placeholders(text: str, token: str, clips: int) -> None:
    """Refuse a prompt whose audio placeholders are not one per clip, in one line."""
    count = text.count(token)
    if count != clips:
        raise MobiusError(
            f"the prompt holds {count} {token} placeholder(s) for {clips} audio clip(s): "
            "put one per clip"
        )


def render_user_turn(prompter, content, system: str | None) -> str:
    """``prompter``'s chat template (its ``tokenizer``, ``template`` and ``package_dir``)
    over one user message of ``content``, after a system message when ``system`` is given,
    ending with the generation prompt: the text transformers' processors tokenize."""
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return render_chat_template(
        prompter.tokenizer,
        messages,
        source=prompter.package_dir,
        chat_template=prompter.template,
        add_generation_prompt=True,
    )


def expand_placeholders(text: str, token: str, counts) -> str:
    """``text`` with its n-th ``token`` repeated ``counts[n]`` times (each clip's audio tokens),
    as transformers' processors expand it."""
    pieces = text.split(token)
    return pieces[0] + "".join(
        token * int(n) + piece for n, piece in zip(counts, pieces[1:], strict=True)
    )


class OneClipPrompt:
    """A speech LLM's processor that pairs each prompt with at most one clip, as
    transformers' processors of Audio Flamingo 3 and Qwen3-ASR do.

    A subclass has ``name``, ``tokenizer``, ``audio_token``, :meth:`prompt_text` (the text
    before the placeholder is expanded) and :meth:`with_audio`.
    """

    name = "this model"

    def with_audio(self, text: str, clip: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
        """``text`` with its placeholder expanded to the clip's tokens, and the clip's feeds."""
        raise NotImplementedError

    def __call__(
        self, prompt: str, clips: list, *, chat_template: bool = True, system: str | None = None
    ) -> dict[str, np.ndarray]:
        """``input_ids`` [1, sequence] and, with a clip, its features and mask."""
        if len(clips) > 1:
            raise MobiusError(f"{self.name} takes one audio clip a prompt, not {len(clips)}")
        clips = [np.asarray(clip, np.float32).reshape(-1) for clip in clips]
        text = self.prompt_text(prompt, len(clips), chat_template=chat_template, system=system)
        check_placeholders(text, self.audio_token, len(clips))
        audio = {}
        if clips:
            text, audio = self.with_audio(text, clips[0])
        ids = np.asarray([self.tokenizer(text)["input_ids"]], np.int64)
        return {"input_ids": ids, **audio}
