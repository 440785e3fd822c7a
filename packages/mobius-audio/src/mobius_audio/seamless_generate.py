"""Speech translation with a SeamlessM4T (v1, v2) speech-to-text package.

The decoder's prompt is ``decoder_start_token_id`` (``</s>``) then the target
language's token, as transformers' ``SeamlessM4TForSpeechToText.generate(...,
tgt_lang=...)`` makes it: the language (``--language fra``; ``__fra__`` is read as
``fra``) is looked up in the package's ``generation_config.json``
``text_decoder_lang_to_code_id`` map. That map comes from a stranger's file, so
its keys, ids and their range are checked before use. :class:`TargetLanguage` is
shared with the text-to-text runner (:mod:`mobius_audio.seamless_text_generate`).
"""

from __future__ import annotations

from mobius.errors import MobiusError
from mobius.generate import PackageError
from mobius_audio.generate import SpeechToTextGenerator

LANGUAGE_MAP = "text_decoder_lang_to_code_id"


class TargetLanguage:
    """The target language's token of a SeamlessM4T package (a generator's mixin)."""

    target_language: str | None = None

    def language_token(self) -> int:
        """The target language's token id, from the generation config's map (checked)."""
        language = self.target_language
        if not language:
            raise MobiusError(
                "SeamlessM4T translates into a target language: give it, e.g. --language fra"
            )
        table = self.generation_config.get(LANGUAGE_MAP)
        if not isinstance(table, dict) or not table:
            raise PackageError(
                f"generation_config.json in {self.package_dir} has no {LANGUAGE_MAP} map: "
                "the target language has no token"
            )
        code = language.replace("__", "")  # transformers accepts "__fra__" for "fra"
        token = table.get(code)
        if token is None:
            known = ", ".join(sorted(str(key) for key in table)[:12])
            raise MobiusError(
                f"--language {language!r} is not a target language of this package "
                f"({len(table)} known: {known}{', ...' if len(table) > 12 else ''})"
            )
        vocab = self.config.get("vocab_size")
        in_range = isinstance(vocab, int) and 0 <= token < vocab
        if not isinstance(token, int) or isinstance(token, bool) or not in_range:
            raise PackageError(f"{LANGUAGE_MAP}[{code!r}]={token!r} is not a token id of the model")
        return token


class SeamlessM4TGenerator(TargetLanguage, SpeechToTextGenerator):
    """:class:`~mobius_audio.generate.SpeechToTextGenerator` with SeamlessM4T's target-language prompt."""

    def set_options(self, *, language=None, task=None, timestamps=None) -> None:
        """``language``: the target language's code (``fra``, ``eng``...); task and timestamps are refused."""
        flags = [flag for flag, value in (("--task", task), ("--timestamps", timestamps)) if value]
        if flags:
            raise MobiusError(
                f"{', '.join(flags)} apply to Whisper packages; {self.package_dir} is a SeamlessM4T "
                "package: it takes --language, the language to translate into"
            )
        self.target_language = language

    def prompt_ids(self, cross) -> list[int]:
        """``[decoder_start_token_id, target language token]``."""
        return [*super().prompt_ids(cross), self.language_token()]
