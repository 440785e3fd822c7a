"""``mobius generate`` transcribes a WAV file with Speech2Text and Moonshine as transformers does.

A tiny random model of each (every parameter perturbed) is saved with its real
feature extractor and a tiny tokenizer, built with the CLI and run by
:class:`mobius_audio.generate.SpeechToTextGenerator` and ``python -m mobius generate``:
the encoder takes the extractor's source and ``attention_mask``, the decoder the
encoder's ``encoder_attention_mask``. Tokens and text must equal those of
transformers' ``generate`` on the same WAV through the same extractor.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_moonshine_parity import CASES as MOONSHINE_CASES
from test_moonshine_parity import feature_extractor as moonshine_extractor
from test_speech_to_text_parity import SPEECH2TEXT
from test_whisper_end_to_end import reference_audio, write_wav
from transformers import AutoConfig, Speech2TextFeatureExtractor

from mobius.cli import main
from mobius.testing import build_with_cli, make_random_seq2seq, tiny_tokenizer
from mobius_audio.generate import SpeechToTextGenerator, extract_inputs

MAX_NEW_TOKENS = 12


def speech2text_extractor() -> Speech2TextFeatureExtractor:
    return Speech2TextFeatureExtractor(feature_size=80, num_mel_bins=80)


# model_type, config, extractor, tokenizer's special tokens, generation config settings
CASES = {
    "speech_to_text": (
        "speech_to_text", SPEECH2TEXT, speech2text_extractor, {"<s>": 0, "</s>": 2}, {},
    ),
    # multilingual Speech2Text: the target language token is forced after the start token
    "speech_to_text-forced-bos": (
        "speech_to_text", SPEECH2TEXT, speech2text_extractor, {"<s>": 0, "</s>": 2},
        {"forced_bos_token_id": 5},
    ),
    "moonshine": (
        "moonshine", MOONSHINE_CASES["moonshine"], moonshine_extractor, {"<s>": 1, "</s>": 2}, {},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_generate_transcribes_a_wav(tmp_path, capsys, case):
    import torch

    model_type, overrides, make_extractor, special, generation = CASES[case]
    extractor = make_extractor()
    hf_config = AutoConfig.for_model(model_type, **overrides)
    model = make_random_seq2seq(hf_config, seed=1, auto_class="AutoModelForSpeechSeq2Seq")
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(tmp_path / "hf")
    extractor.save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer(overrides["vocab_size"], special)
    tokenizer.save_pretrained(tmp_path / "hf")
    wav_path = tmp_path / "speech.wav"
    write_wav(wav_path)

    rate = extractor.sampling_rate
    audio = reference_audio(wav_path, rate)
    inputs = extract_inputs(extractor, audio, rate, model.main_input_name, mask=True)
    with torch.no_grad():
        generated = model.generate(
            **{k: torch.from_numpy(v) for k, v in inputs.items()}, do_sample=False,
            max_new_tokens=MAX_NEW_TOKENS,
        )[0].tolist()  # fmt: skip
    expected = generated[1:]  # after the decoder start token
    eos = overrides["eos_token_id"]
    expected = expected[: expected.index(eos)] if eos in expected else expected
    assert len(set(expected)) > 1, "a degenerate reference: the test would prove little"
    if "forced_bos_token_id" in generation:
        assert expected[0] == generation["forced_bos_token_id"]

    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    generator = SpeechToTextGenerator(out)
    tokens = list(generator.transcribe_ids(audio, rate, max_new_tokens=MAX_NEW_TOKENS))
    assert tokens == expected

    run = subprocess.run(
        [sys.executable, "-m", "mobius", "generate", str(out), str(wav_path),
         "--max-new-tokens", str(MAX_NEW_TOKENS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == tokenizer.decode(expected, skip_special_tokens=True)

    # Language, task and timestamps are Whisper's: a one-line refusal, naming the flags.
    capsys.readouterr()
    assert main(["generate", str(out), str(wav_path), "--timestamps", "--task", "translate"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"mobius: error: --task, --timestamps apply to Whisper packages; {out} is a "
        "speech-to-text package without language, task or timestamp tokens\n"
    )
