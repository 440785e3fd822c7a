"""Parakeet RNN-T and TDT: the transducer graphs against transformers, and ``mobius generate``.

A tiny random ``ParakeetForRNNT`` and ``ParakeetForTDT`` (every parameter perturbed;
the blank's joint bias raised so that the greedy path mixes blanks and tokens) with a
12-token ``ParakeetTokenizer`` (``<pad>`` 10, ``<blank>`` 11, both special) are built
once each with the CLI (TDT with ``--validate``). On a batch of two clips of different lengths:
the encoder's projected states and lengths, four prediction-network steps with the
LSTM state carried, and the joint's logits within 1e-4 of transformers' modules; the
runner's tokens for the batch equal transformers' greedy ``generate`` on each clip
alone. ``mobius generate PKG clip.wav`` prints what transformers' tokenizer decodes
from ``generate``'s sequence. RNN-T runs with ``max_symbols_per_step`` 3, so the
forced move to the next frame is taken; TDT with durations 0 to 4.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import groupby
from pathlib import Path

import pytest
import torch
import transformers
from audio_encoder_cases.parakeet import ENCODER
from test_audio_encoders_run import RATE, run_cli, write_wav
from test_whisper_end_to_end import reference_audio
from test_whisper_end_to_end import write_wav as write_speech
from transformers import AutoConfig
from transformers import ParakeetFeatureExtractor as HFExtractor

from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_audio.testing._transducer_parity import compare_transducer, reference_tokens
from mobius_audio.transducer import Transducer

VOCAB = ["<unk>", "▁a", "b", "▁c", "d", "▁e", "f", "▁g", "h", "▁i", "<pad>", "<blank>"]
PAD, BLANK = 10, 11
#: model_type -> (config overrides, the raise of the blank's joint bias).
FAMILIES = {
    "parakeet_rnnt": (dict(max_symbols_per_step=3), 4.0),
    "parakeet_tdt": (dict(max_symbols_per_step=10, durations=[0, 1, 2, 3, 4]), 1.75),
}


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return transformers.ParakeetTokenizer(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens=["<blank>"],
    )


def make_model(model_type: str, seed: int = 0, blank_push=None, duration_push: float = 0.0):
    """The tiny random model; ``blank_push`` (default the family's) raises the blank's joint
    bias, ``duration_push`` TDT's one-frame duration's."""
    overrides, family_push = FAMILIES[model_type]
    blank_push = family_push if blank_push is None else blank_push
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(VOCAB),
        blank_token_id=BLANK,
        pad_token_id=PAD,
        decoder_hidden_size=24,
        num_decoder_layers=2,
        encoder_config=ENCODER,
        **overrides,
    )
    torch.manual_seed(seed)
    model_class = (
        transformers.ParakeetForRNNT if model_type.endswith("rnnt") else transformers.ParakeetForTDT
    )
    model = model_class(config).eval()
    # A larger perturbation than the kit's: at 0.05 every step of the tiny model picks one token.
    perturb_parameters(model, seed, scale=0.3)
    with torch.no_grad():
        model.joint.head.bias[BLANK] += blank_push
        if duration_push:
            model.joint.head.bias[len(VOCAB) + 1] += duration_push
    model.generation_config.decoder_start_token_id = BLANK
    if (
        model_type == "parakeet_tdt"
    ):  # as the hub's TDT generation configs: no duration id as a token
        durations = range(len(VOCAB), len(VOCAB) + len(config.durations))
        model.generation_config.suppress_tokens = list(durations)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def package(request, tmp_path_factory):
    """``(model, hf_dir, package_dir, clips, parity)``: one family saved, built and compared once."""
    root = tmp_path_factory.mktemp(request.param)
    model = make_model(request.param)
    hf_dir = root / "hf"
    model.save_pretrained(hf_dir)
    HFExtractor(feature_size=ENCODER["num_mel_bins"]).save_pretrained(hf_dir)
    tiny_tokenizer().save_pretrained(hf_dir)
    clips = [
        (str(root / "a.wav"), write_wav(root / "a.wav", 0.5, 440.0, 0)),
        (str(root / "b.wav"), write_wav(root / "b.wav", 0.35, 1300.0, 1)),
    ]
    # --validate runs the same kit as below: proven on one family, spared on the other.
    validate = ("--validate",) if request.param == "parakeet_tdt" else ()
    built = build_with_cli(hf_dir, root / "onnx", *validate)
    parity = compare_transducer(model, Transducer(built), [samples for _, samples in clips])
    return model, hf_dir, built, clips, parity


def test_graphs_and_tokens_match_transformers(package):
    model, _, _, _, result = package
    assert all(d <= PARITY_ATOL for d in result.diffs.values()), result.diffs
    expected = {"encoder_hidden_states", "present_cell_state", "token_logits"}
    assert expected <= set(result.diffs), result.diffs
    assert ("duration_logits" in result.diffs) == (model.config.model_type == "parakeet_tdt")
    assert result.tokens == result.expected_tokens
    # The clips exercise the decoding: blanks and tokens both emitted; RNN-T's runs of
    # max_symbols_per_step tokens, each ending with the forced move to the next frame.
    emitted = {t for row in result.tokens for t in row}
    assert BLANK in emitted and emitted - {BLANK}, result.tokens
    if model.config.model_type == "parakeet_rnnt":
        runs = [
            len(list(run))
            for row in result.tokens
            for b, run in groupby(row, BLANK.__eq__)
            if not b
        ]
        assert max(runs) >= model.config.max_symbols_per_step, result.tokens


def test_generate_prints_transformers_text(package, capsys):
    _, hf_dir, built, clips, parity = package
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    texts = []
    for (path, _), sequence in zip(clips, parity.expected_tokens, strict=True):
        expected = tokenizer.decode(sequence, skip_special_tokens=True, group_tokens=False)
        code, lines, err = run_cli(capsys, "generate", built, path)
        assert code == 0, err
        assert lines == [expected]
        texts.append(expected)
    assert any(texts), texts


def test_refusals(package, capsys, tmp_path):
    _, _, built, clips, _ = package
    bad = tmp_path / "bad"
    bad.mkdir()
    for item in Path(built).iterdir():
        if item.name != "config.json":
            (bad / item.name).symlink_to(item)
    config = json.loads((Path(built) / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(dict(config, blank_token_id="11")))
    refusals = {
        "blank_token_id '11' is not an integer": ("generate", bad, clips[0][0]),
        "no such file": ("generate", built, tmp_path / "missing.wav"),
        "transcribes greedily": ("generate", built, clips[0][0], "--do-sample"),
        # another runner's option is refused, not ignored (the runner declares what it reads)
        "--source-language applies to SeamlessM4T text-to-text packages": (
            "generate", built, clips[0][0], "--source-language", "deu",
        ),
    }  # fmt: skip
    for message, args in refusals.items():
        code, lines, err = run_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err


def test_generate_transcribes_speech(tmp_path):
    """espeak-ng speech (else a tone) through ``python -m mobius generate``: transformers' text."""
    # Moving on a frame after most tokens: else the tiny TDT repeats one token at one frame.
    model = make_model("parakeet_tdt", seed=1, blank_push=1.0, duration_push=1.5)
    model.save_pretrained(tmp_path / "hf")
    HFExtractor(feature_size=ENCODER["num_mel_bins"]).save_pretrained(tmp_path / "hf")
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(tmp_path / "hf")
    wav = tmp_path / "speech.wav"
    # without espeak-ng, a tone: its noise of seed 2 makes the tiny model say three tokens
    # (seed 0's, one), so a machine without Debian's packages runs the comparison too
    write_speech(wav, seed=2)
    built = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    (sequence,) = reference_tokens(model, Transducer(built), [reference_audio(wav, RATE)])
    assert len(set(sequence) - {BLANK}) >= 2, sequence
    run = subprocess.run(
        [sys.executable, "-m", "mobius", "generate", str(built), str(wav)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    expected = tokenizer.decode(sequence, skip_special_tokens=True, group_tokens=False)
    assert run.stdout.splitlines() == [expected]
