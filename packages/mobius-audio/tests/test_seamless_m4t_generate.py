"""``mobius generate --language fra`` translates a WAV with SeamlessM4T as transformers' ``generate`` does.

A tiny random SeamlessM4TForSpeechToText (every parameter perturbed) is saved with
the real SeamlessM4TFeatureExtractor, a tiny tokenizer and a generation config
whose ``text_decoder_lang_to_code_id`` maps ``fra`` and ``eng``; built with the CLI
once, it is run by ``mobius generate``: the prompt is ``</s>`` then ``__fra__``'s
token, and the greedy tokens and text must equal those of
``model.generate(input_features, tgt_lang="fra")`` (num_beams=1, no sampling).
Missing or unknown languages, Whisper's flags and a broken language map each give
a one-line error.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_seamless_m4t_parity import CASES, LANGUAGES
from test_whisper_end_to_end import reference_audio, write_wav
from transformers import AutoConfig, SeamlessM4TFeatureExtractor

from mobius.cli import main
from mobius.testing import build_with_cli, make_random_seq2seq, tiny_tokenizer
from mobius_audio.generate import extract_inputs, open_speech_generator
from mobius_audio.seamless_generate import SeamlessM4TGenerator

MAX_NEW_TOKENS = 10
SPECIAL = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "__fra__": 5, "__eng__": 6}


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    """(package, wav, tokenizer, transformers' new tokens after ``</s> __fra__``)."""
    import torch

    tmp = tmp_path_factory.mktemp("seamless")
    model_type, overrides, _ = CASES["seamless_m4t-relative"]
    model = make_random_seq2seq(
        AutoConfig.for_model(model_type, **overrides), seed=0,
        auto_class="AutoModelForSpeechSeq2Seq",
    )  # fmt: skip
    model.generation_config.text_decoder_lang_to_code_id = LANGUAGES
    extractor = SeamlessM4TFeatureExtractor()
    tokenizer = tiny_tokenizer(overrides["vocab_size"], SPECIAL)
    for part in (model, extractor, tokenizer):
        part.save_pretrained(tmp / "hf")
    wav = tmp / "speech.wav"
    write_wav(wav)

    rate = extractor.sampling_rate
    inputs = extract_inputs(extractor, reference_audio(wav, rate), rate, mask=True)
    with torch.no_grad():
        generated = model.generate(
            **{k: torch.from_numpy(v) for k, v in inputs.items()}, tgt_lang="fra",
            num_beams=1, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
        )[0].tolist()  # fmt: skip
    assert generated[:2] == [model.config.decoder_start_token_id, LANGUAGES["fra"]]
    expected = generated[2:]
    eos = model.config.eos_token_id
    expected = expected[: expected.index(eos)] if eos in expected else expected
    assert len(set(expected)) > 1, "a degenerate reference: the test would prove little"
    return build_with_cli(tmp / "hf", tmp / "onnx"), wav, tokenizer, expected


def test_generate_translates_into_the_target_language(translated, capsys):
    package, wav, tokenizer, expected = translated
    generator = open_speech_generator(package)
    assert isinstance(generator, SeamlessM4TGenerator)
    generator.set_options(language="__fra__")  # transformers' spelling is accepted too
    audio = reference_audio(wav, generator.sampling_rate)
    tokens = list(
        generator.transcribe_ids(audio, generator.sampling_rate, max_new_tokens=MAX_NEW_TOKENS)
    )
    assert tokens == expected

    capsys.readouterr()
    argv = [
        "generate",
        str(package),
        str(wav),
        "--language",
        "fra",
        "--max-new-tokens",
        str(MAX_NEW_TOKENS),
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.rstrip("\n") == tokenizer.decode(
        expected, skip_special_tokens=True
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "SeamlessM4T translates into a target language: give it, e.g. --language fra"),
        (["--language", "deu"], "--language 'deu' is not a target language of this package (2 known: eng, fra)"),
        (["--language", "fra", "--task", "translate"], "--task apply to Whisper packages; {package} is a SeamlessM4T package: it takes --language, the language to translate into"),
    ],
)  # fmt: skip
def test_generate_refuses_without_a_target_language(translated, capsys, flags, message):
    package, wav, _, _ = translated
    capsys.readouterr()
    assert main(["generate", str(package), str(wav), *flags]) == 1
    assert capsys.readouterr().err == f"mobius: error: {message.format(package=package)}\n"


def test_generate_refuses_a_broken_language_map(translated, tmp_path, capsys):
    package, wav, _, _ = translated
    broken = tmp_path / "package"
    shutil.copytree(package, broken)
    config_path = broken / "generation_config.json"
    config = json.loads(config_path.read_text())
    config["text_decoder_lang_to_code_id"] = {"fra": 10**6}  # past the vocabulary
    config_path.write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["generate", str(broken), str(wav), "--language", "fra"]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == "mobius: error: text_decoder_lang_to_code_id['fra']=1000000 is not a token id of the model\n"
    )


def test_validate_v2_runs_the_reference_that_masks_the_chunks(tmp_path):
    """``--validate`` on v2 (chunked attention, one adapter layer as real checkpoints have)
    compares with transformers' SDPA attention: its eager path adds the boolean chunk mask
    to the scores, which an eager reference would report as a mismatch."""
    from mobius.validate import validate_package

    model_type, overrides, _ = CASES["seamless_m4t_v2"]
    config = AutoConfig.for_model(model_type, **dict(overrides, num_adapter_layers=1))
    model = make_random_seq2seq(config, seed=0, auto_class="AutoModelForSpeechSeq2Seq")
    for part in (model, SeamlessM4TFeatureExtractor()):
        part.save_pretrained(tmp_path / "hf")
    package = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    report = validate_package(package, tmp_path / "hf")
    assert report.passed, report.summary()
