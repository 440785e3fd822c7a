"""``mobius generate`` transcribes a WAV file with SpeechT5 as transformers' ``generate`` does.

A tiny random SpeechT5ForSpeechToText (every parameter perturbed) is saved with its
real SpeechT5FeatureExtractor (normalising) and a tiny tokenizer, built once with
the CLI, and run three ways: :class:`mobius_audio.generate.SpeechToTextGenerator`
(the tokens), ``mobius.cli.main`` (the text) and ``python -m mobius generate`` in a
process where torch cannot be imported (the runner needs none). All must equal
transformers' greedy ``generate`` on the same WAV through the same extractor. The
build runs ``--validate`` (:mod:`mobius_audio.validate`), whose report must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_speecht5_parity import SPEECHT5
from test_whisper_end_to_end import reference_audio, write_wav
from transformers import AutoConfig, SpeechT5FeatureExtractor

from mobius.cli import main
from mobius.testing import build_with_cli, make_random_seq2seq, tiny_tokenizer
from mobius_audio.generate import SpeechToTextGenerator, extract_inputs

MAX_NEW_TOKENS = 12
# sys.modules["torch"] = None makes `import torch` fail and transformers see no torch.
WITHOUT_TORCH = (
    "import sys; sys.modules['torch'] = None; from mobius.cli import main; sys.exit(main())"
)


@pytest.fixture(scope="module")
def speecht5(tmp_path_factory):
    """``(package, wav, expected tokens, expected text)``, built once for the module's tests."""
    import torch

    tmp = tmp_path_factory.mktemp("speecht5")
    extractor = SpeechT5FeatureExtractor(do_normalize=True)
    hf_config = AutoConfig.for_model(
        "speecht5", architectures=["SpeechT5ForSpeechToText"], **SPEECHT5
    )
    model = make_random_seq2seq(hf_config, seed=2, auto_class="AutoModelForSpeechSeq2Seq")
    model.save_pretrained(tmp / "hf")
    extractor.save_pretrained(tmp / "hf")
    tokenizer = tiny_tokenizer(SPEECHT5["vocab_size"], {"<s>": 0, "</s>": 2})
    tokenizer.save_pretrained(tmp / "hf")
    wav = tmp / "speech.wav"
    write_wav(wav)

    rate = extractor.sampling_rate
    inputs = extract_inputs(extractor, reference_audio(wav, rate), rate, "input_values", mask=True)
    with torch.no_grad():
        generated = model.generate(
            **{k: torch.from_numpy(v) for k, v in inputs.items()}, do_sample=False,
            max_new_tokens=MAX_NEW_TOKENS,
        )[0].tolist()  # fmt: skip
    expected = generated[1:]  # after the decoder start token
    eos = SPEECHT5["eos_token_id"]
    expected = expected[: expected.index(eos)] if eos in expected else expected
    assert len(set(expected)) > 1, "a degenerate reference: the test would prove little"
    package = build_with_cli(tmp / "hf", tmp / "onnx", "--validate")
    return package, wav, expected, tokenizer.decode(expected, skip_special_tokens=True)


def test_generator_tokens_equal_transformers(speecht5):
    package, wav, expected, _ = speecht5
    generator = SpeechToTextGenerator(package)
    audio = reference_audio(wav, 16000)
    assert list(generator.transcribe_ids(audio, 16000, max_new_tokens=MAX_NEW_TOKENS)) == expected


def test_cli_prints_transformers_text(speecht5, capsys):
    package, wav, _, text = speecht5
    capsys.readouterr()
    assert main(["generate", str(package), str(wav), "--max-new-tokens", str(MAX_NEW_TOKENS)]) == 0
    assert capsys.readouterr().out.rstrip("\n") == text


def test_cli_runs_without_torch(speecht5):
    package, wav, _, text = speecht5
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "generate", str(package), str(wav),
         "--max-new-tokens", str(MAX_NEW_TOKENS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == text


def test_cli_refuses_bad_audio(speecht5, tmp_path, capsys):
    package = speecht5[0]
    missing = tmp_path / "missing.wav"
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not audio")
    capsys.readouterr()
    assert main(["generate", str(package), str(missing)]) == 1
    assert capsys.readouterr().err == f"mobius: error: no such file: {missing}\n"
    assert main(["generate", str(package), str(not_audio)]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith(f"mobius: error: cannot decode {not_audio} as audio")
        and err.count("\n") == 1
    )


def test_build_validates(speecht5):
    report = json.loads((speecht5[0] / "mobius.json").read_text())["validation"]
    assert report["passed"] and report["tokens_agree"], report
    assert report["reference"] == "transformers SpeechT5ForSpeechToText"
    assert max(report["diffs"].values()) <= 1e-4, report["diffs"]


def char_sentencepiece(directory) -> str:
    """A character-level sentencepiece model as SpeechT5's ``spm_char.model`` is (28 ids:
    ``<s> <pad> </s> <unk>``, the word boundary and the letters), trained here."""
    import sentencepiece

    corpus = directory / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    prefix = directory / "spm_char"
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), model_type="char", vocab_size=28,
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2,
    )  # fmt: skip
    return f"{prefix}.model"


def test_a_sentencepiece_tokenizer_travels_with_the_package(tmp_path, capsys):
    """SpeechT5's real tokenizer (spm_char.model, no tokenizer.json form) is copied into the
    package and decodes the transcription as transformers' tokenizer does."""
    import torch
    from transformers import SpeechT5Tokenizer

    tokenizer = SpeechT5Tokenizer(char_sentencepiece(tmp_path))
    hf_config = AutoConfig.for_model(
        "speecht5", architectures=["SpeechT5ForSpeechToText"], **dict(SPEECHT5, vocab_size=28)
    )
    model = make_random_seq2seq(hf_config, seed=5, auto_class="AutoModelForSpeechSeq2Seq")
    model.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    extractor = SpeechT5FeatureExtractor(do_normalize=True)
    extractor.save_pretrained(tmp_path / "hf")
    wav = tmp_path / "speech.wav"
    write_wav(wav)
    inputs = extract_inputs(
        extractor, reference_audio(wav, 16000), 16000, "input_values", mask=True
    )
    with torch.no_grad():
        generated = model.generate(
            **{k: torch.from_numpy(v) for k, v in inputs.items()}, do_sample=False,
            max_new_tokens=MAX_NEW_TOKENS,
        )[0].tolist()  # fmt: skip
    text = tokenizer.decode(generated, skip_special_tokens=True)
    assert text.strip(), "a degenerate reference: the test would prove little"

    package = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    assert (package / "spm_char.model").is_file()
    capsys.readouterr()
    assert main(["generate", str(package), str(wav), "--max-new-tokens", str(MAX_NEW_TOKENS)]) == 0
    assert capsys.readouterr().out.rstrip("\n") == text
