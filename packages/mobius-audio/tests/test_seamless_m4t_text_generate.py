"""``mobius generate PKG "text" --language fra`` translates as transformers' SeamlessM4TForTextToText.

A tiny random SeamlessM4TForTextToText (every parameter perturbed) is saved with a
tiny SeamlessM4TTokenizer (one token a character, the fairseq specials and
``__fra__``, ``__eng__``, ``__deu__``) and a generation config whose
``text_decoder_lang_to_code_id`` maps them; built with the CLI once, it is run by
``mobius generate``. The source must be the tokenizer's ``__eng__ ... </s>`` (or
``__deu__`` with ``--source-language deu``); the new tokens and text must equal
those of ``model.generate(input_ids, tgt_lang="fra", num_beams=1, do_sample=False)``
(greedy, as transformers' default generation config is). Missing or unknown
languages and Whisper's flags each give a one-line error.
"""

from __future__ import annotations

import string

import pytest
from test_seamless_m4t_parity import TINY
from transformers import AutoConfig, SeamlessM4TTokenizer

from mobius.cli import main
from mobius.testing import build_with_cli, make_random_seq2seq
from mobius_audio.seamless_text_generate import SeamlessM4TTextGenerator

MAX_NEW_TOKENS = 10
LANGUAGES = {"fra": 5, "eng": 6, "deu": 7}
TEXT = "hello world"


def char_tokenizer() -> SeamlessM4TTokenizer:
    """fairseq's four specials, ``▁`` at 4, the language tokens, then one token a character (64 in all)."""
    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "▁": 4}
    vocab.update({f"__{code}__": i for code, i in LANGUAGES.items()})
    for char in string.ascii_lowercase + string.ascii_uppercase + "0123":
        vocab[char] = len(vocab)
    assert len(vocab) == 64
    languages = [f"__{code}__" for code in LANGUAGES]
    return SeamlessM4TTokenizer(vocab=vocab, merges=[], additional_special_tokens=languages)


def reference_tokens(model, tokenizer, source_language: str) -> tuple[list[int], list[int]]:
    """(the source ids, transformers' new tokens after ``</s> __fra__``, up to the end token)."""
    import torch

    source = tokenizer(TEXT, src_lang=source_language, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        generated = model.generate(
            source, tgt_lang="fra", num_beams=1, do_sample=False, max_new_tokens=MAX_NEW_TOKENS
        )[0].tolist()
    assert generated[:2] == [model.config.decoder_start_token_id, LANGUAGES["fra"]]
    eos = model.config.eos_token_id
    new = generated[2:]
    return source[0].tolist(), new[: new.index(eos)] if eos in new else new


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    """(package, tokenizer, {source language: (source ids, transformers' new tokens)})."""
    tmp = tmp_path_factory.mktemp("seamless_text")
    config = AutoConfig.for_model("seamless_m4t", **dict(TINY, tie_word_embeddings=False))
    model = make_random_seq2seq(config, seed=3)  # seeds 0 and 1 end at once
    model.generation_config.text_decoder_lang_to_code_id = LANGUAGES
    tokenizer = char_tokenizer()
    for part in (model, tokenizer):
        part.save_pretrained(tmp / "hf")
    expected = {lang: reference_tokens(model, tokenizer, lang) for lang in ("eng", "deu")}
    for _, tokens in expected.values():
        assert len(set(tokens)) > 1, "a degenerate reference: the test would prove little"
    eng, deu = expected["eng"][0], expected["deu"][0]
    assert eng[0] == LANGUAGES["eng"] and deu[0] == LANGUAGES["deu"] and eng[1:] == deu[1:]
    assert eng[-1] == model.config.eos_token_id
    return build_with_cli(tmp / "hf", tmp / "onnx"), tokenizer, expected


@pytest.mark.parametrize("source_language", ["eng", "deu"])
def test_generate_translates_into_the_target_language(translated, capsys, source_language):
    package, tokenizer, expected = translated
    source, tokens = expected[source_language]
    generator = SeamlessM4TTextGenerator(package)
    generator.target_language = "__fra__"  # transformers' spelling is accepted too
    generator.source_language = None if source_language == "eng" else source_language
    assert generator.encode_prompt(TEXT) == source
    assert list(generator.generate_ids(source, max_new_tokens=MAX_NEW_TOKENS)) == tokens

    capsys.readouterr()
    flags = ["--language", "fra", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    if source_language != "eng":
        flags += ["--source-language", source_language]
    assert main(["generate", str(package), TEXT, *flags]) == 0
    assert capsys.readouterr().out.rstrip("\n") == tokenizer.decode(
        tokens, skip_special_tokens=True
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "SeamlessM4T translates into a target language: give it, e.g. --language fra"),
        (["--language", "spa"], "--language 'spa' is not a target language of this package (3 known: deu, eng, fra)"),
        (["--language", "fra", "--source-language", "spa"], "--source-language 'spa' is not a language of this package's tokenizer (it has no __spa__ token)"),
        (["--language", "fra", "--timestamps"], "--timestamps apply to Whisper packages; {package} is a SeamlessM4T text-to-text package: it takes --language and --source-language"),
    ],
)  # fmt: skip
def test_generate_refuses_bad_languages(translated, capsys, flags, message):
    package, _, _ = translated
    capsys.readouterr()
    assert main(["generate", str(package), TEXT, *flags]) == 1
    assert capsys.readouterr().err == f"mobius: error: {message.format(package=package)}\n"
