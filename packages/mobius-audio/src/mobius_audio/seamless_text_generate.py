"""Text translation with a SeamlessM4T (v1, v2) text-to-text package: ``mobius generate PKG "text" --language fra``.

The source is tokenized as transformers' ``SeamlessM4TTokenizer`` makes it,
``__eng__ ... </s>``: the source language is the tokenizer's ``src_lang``
(``tokenizer_config.json``; the hub's is ``eng``) unless ``--source-language``
names another. The decoder's prompt is ``</s>`` then the target language's token,
looked up (and checked) in ``generation_config.json``'s
``text_decoder_lang_to_code_id`` map, as ``SeamlessM4TForTextToText.generate(
input_ids, tgt_lang=...)`` does; the new tokens follow it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mobius.errors import MobiusError
from mobius.generate import PackageError, Seq2SeqGenerator, read_graph, stream_to_stdout
from mobius_audio.models.seamless_m4t_text import SEAMLESS_TYPES
from mobius_audio.seamless_generate import TargetLanguage


def is_seamless_text_package(package: str | os.PathLike) -> bool:
    """Whether ``package`` is a SeamlessM4T package whose encoder takes text (``input_ids``)."""
    package = Path(package)
    encoder = package / "encoder" / "model.onnx"
    if not encoder.is_file() or not (package / "config.json").is_file():
        return False
    try:
        config = json.loads((package / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # not ours to judge: the runner that takes it names the broken file
    if not isinstance(config, dict) or config.get("model_type") not in SEAMLESS_TYPES:
        return False

    inputs = {i.name for i in read_graph(encoder).graph.input}
    return "input_ids" in inputs


class SeamlessM4TTextGenerator(TargetLanguage, Seq2SeqGenerator):
    """:class:`~mobius.generate.Seq2SeqGenerator` with SeamlessM4T's source and target languages."""

    #: The source language's code (``deu``); ``None``: the tokenizer's own ``src_lang``.
    source_language: str | None = None

    def encode_prompt(self, prompt: str, *, chat_template: bool = True, system=None) -> list[int]:
        """``__<source>__ ... </s>``, as the tokenizer's source mode makes it (no chat template)."""
        if system is not None:
            raise MobiusError("a SeamlessM4T translation takes no system message")
        tokenizer = self.tokenizer
        if self.source_language is None:
            return list(tokenizer(prompt)["input_ids"])
        if not isinstance(getattr(type(tokenizer), "src_lang", None), property):
            raise PackageError(
                f"the tokenizer of {self.package_dir} ({type(tokenizer).__name__}) takes no "
                "source language: drop --source-language"
            )
        code = self.source_language.replace("__", "")
        token_id = tokenizer.convert_tokens_to_ids(f"__{code}__")
        if token_id is None or token_id == tokenizer.unk_token_id:
            raise MobiusError(
                f"--source-language {self.source_language!r} is not a language of this "
                f"package's tokenizer (it has no __{code}__ token)"
            )
        return list(tokenizer(prompt, src_lang=code)["input_ids"])

    def decoder_prompt(self, start: int) -> list[int]:
        """``</s> __<target>__``, transformers' decoder prompt: the tokens yielded (and
        ``max_new_tokens``) are those after it."""
        return [start, self.language_token()]


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """mobius-audio's ``mobius generate`` runner of SeamlessM4T text-to-text packages."""
    flags = [
        f
        for f, dest in (("--task", "speech_task"), ("--timestamps", "timestamps"))
        if options.get(dest)
    ]
    if flags:
        raise MobiusError(
            f"{', '.join(flags)} apply to Whisper packages; {package_dir} is a SeamlessM4T "
            "text-to-text package: it takes --language and --source-language"
        )
    generator = SeamlessM4TTextGenerator(package_dir, threads=options.get("threads"))
    generator.target_language = options.get("language")
    generator.source_language = options.get("source_language")
    return stream_to_stdout(generator, prompt, options)
