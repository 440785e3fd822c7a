"""Parakeet CTC end to end: the numpy feature extractor, and ``mobius generate`` against transformers.

``mobius_audio.parakeet_features`` must give ``ParakeetFeatureExtractor``'s features:
on the tiny 16-mel setting within 1e-5 of transformers' own (float32, torch) run; on
the default 80 mels, where the narrow low filters hold little energy, torch's float32
STFT itself is off by ~2e-5 from the exact result, so the check there is against the
same steps in float64 (measured 2e-7). A tiny random ``ParakeetForCTC`` (every
parameter perturbed) with a 12-token ``ParakeetTokenizer`` (the blank is the pad
token, id 11) is built once with the CLI; ``mobius generate PKG clip.wav`` must print
what transformers' ``automatic-speech-recognition`` pipeline prints for the same
samples, and ``processor.batch_decode`` of ``ParakeetForCTC.generate`` agrees.
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from audio_encoder_cases.parakeet import ENCODER
from test_audio_encoders_run import RATE, run_cli, write_wav
from transformers import AutoConfig
from transformers import ParakeetFeatureExtractor as HFExtractor

import mobius_audio
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, perturb_parameters
from mobius_audio.parakeet_features import ParakeetFeatureExtractor
from mobius_audio.testing import make_random_audio_model

FEATURE_ATOL = 1e-5
#: SentencePiece-style pieces; "<pad>" (the last id) is the CTC blank.
VOCAB = ["<unk>", "▁a", "b", "▁c", "d", "▁e", "f", "▁g", "h", "▁i", "j", "<pad>"]


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return transformers.ParakeetTokenizer(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>"
    )


def noise(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32) * 0.3 for n in lengths]


def test_features_match_transformers():
    small = dict(feature_size=16)
    hf, ours = HFExtractor(**small), ParakeetFeatureExtractor(**small)
    clips = noise([8000, 5600, 3210])
    expected = hf(clips, sampling_rate=RATE, return_tensors="np")
    got = ours(clips, sampling_rate=RATE)
    np.testing.assert_array_equal(got["attention_mask"], expected["attention_mask"])
    diff = np.abs(got["input_features"] - expected["input_features"]).max()
    assert diff <= FEATURE_ATOL, diff


def test_default_features_match_the_exact_computation():
    """80 mels: against transformers' steps run in float64 (its float32 STFT is off ~2e-5)."""
    hf, ours = HFExtractor(), ParakeetFeatureExtractor.from_dict(HFExtractor().to_dict())

    def float64_fbank(waveform, device="cpu"):
        window = torch.hann_window(hf.win_length, periodic=False, dtype=torch.float64)
        stft = torch.stft(
            waveform.double(), hf.n_fft, hop_length=hf.hop_length, win_length=hf.win_length,
            window=window, return_complex=True, pad_mode="constant",
        )  # fmt: skip
        mel = hf.mel_filters.double() @ stft.abs() ** 2
        return torch.log(mel + 2**-24).permute(0, 2, 1)

    hf._torch_extract_fbank_features = float64_fbank
    clips = noise([8000, 5600], seed=1)
    expected = hf(clips, sampling_rate=RATE, return_tensors="np")["input_features"]
    got = ours(clips, sampling_rate=RATE)["input_features"]
    assert np.abs(got - expected).max() <= 1e-6


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """``(hf_dir, package_dir, clips)``: the tiny ParakeetForCTC saved and built once."""
    root = tmp_path_factory.mktemp("parakeet")
    config = AutoConfig.for_model(
        "parakeet_ctc", vocab_size=len(VOCAB), pad_token_id=len(VOCAB) - 1, encoder_config=ENCODER
    )
    hf_dir = root / "hf"
    model = make_random_audio_model(config, "ctc", seed=0)
    # A second, larger perturbation: at the kit's scale the tiny model's frames all
    # pick one token; this one gives words, repeats and blanks to decode.
    perturb_parameters(model, seed=100, scale=0.3)
    model.save_pretrained(hf_dir)
    HFExtractor(feature_size=ENCODER["num_mel_bins"]).save_pretrained(hf_dir)
    tiny_tokenizer().save_pretrained(hf_dir)
    clips = [
        (str(root / "a.wav"), write_wav(root / "a.wav", 0.5, 440.0, 0)),
        (str(root / "b.wav"), write_wav(root / "b.wav", 0.35, 1300.0, 1)),
    ]
    return hf_dir, build_with_cli(hf_dir, root / "onnx", "--validate"), clips


def test_generate_matches_the_pipeline(package, capsys):
    hf_dir, built, clips = package
    pipe = transformers.pipeline("automatic-speech-recognition", model=str(hf_dir))
    texts = []
    for path, samples in clips:
        expected = pipe({"raw": samples, "sampling_rate": RATE})["text"]
        code, lines, err = run_cli(capsys, "generate", built, path)
        assert code == 0, err
        assert lines == [expected]
        assert mobius_audio.transcribe_ctc(built, samples, sampling_rate=RATE) == expected
        texts.append(expected)

    # transformers' own greedy CTC (generate + the processor's decode) on the batch agrees,
    # and the clips exercise the decoding: words, repeats collapsed, blanks dropped.
    processor = transformers.AutoProcessor.from_pretrained(hf_dir)
    model = transformers.AutoModelForCTC.from_pretrained(hf_dir).eval()
    inputs = processor([s for _, s in clips], sampling_rate=RATE)
    ids = model.generate(**inputs)
    assert processor.batch_decode(ids, skip_special_tokens=True) == texts
    frames = ids[0].tolist()
    assert " " in texts[0] and len(set(frames)) >= 3, (texts, frames)
    assert max(len(list(run)) for _, run in groupby(frames)) > 1, frames
    assert VOCAB.index("<pad>") in frames, frames


def test_refusals(package, capsys, tmp_path):
    """A package without its extractor, a bad extractor value, a missing file: one line each."""
    hf_dir, built, clips = package
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in Path(built).iterdir():
        if item.name != "preprocessor_config.json":
            (broken / item.name).symlink_to(item)
    bad = tmp_path / "bad"
    bad.mkdir()
    for item in Path(built).iterdir():
        if item.name != "preprocessor_config.json":
            (bad / item.name).symlink_to(item)
    (bad / "preprocessor_config.json").write_text(
        '{"feature_extractor_type": "ParakeetFeatureExtractor", "hop_length": "160"}'
    )
    refusals = {
        "no preprocessor_config.json": ("generate", broken, clips[0][0]),
        "hop_length '160' is not a size": ("generate", bad, clips[0][0]),
        "no such file": ("generate", built, tmp_path / "missing.wav"),
    }
    for message, args in refusals.items():
        code, lines, err = run_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err
    with pytest.raises(MobiusError, match="shorter than 320 samples"):
        ParakeetFeatureExtractor()([np.zeros(300, np.float32)])
