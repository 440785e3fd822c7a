"""MusicGen-Melody (text prompts): graph parity with transformers, ``mobius generate`` against its ``generate``.

One tiny random MusicGen-Melody (every parameter perturbed; 5 chroma frames of
conditioning) is built once with the CLI. Parity at fp32 on two texts of different
lengths: the conditioning (a 3-frame chroma tiled to 5, then the text states), the
decoder's prefill over conditioning and codes and its cached steps, within 1e-4.
Generation with sampling off and guidance on gives transformers' codes and audio.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
import soundfile
import torch
from _musicgen_tiny import CHROMA, CODES, DECODER, make_random_musicgen

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.melody_features import ChromaFeatureExtractor
from mobius_audio.music import PrefixMusicGenerator, Sampling, open_music_generator
from mobius_audio.testing._music_parity import transformers_music

TEXTS = ["w3 w5 w7 w9 w11", "w4 w6"]
K = DECODER["num_codebooks"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, package)``."""
    root = tmp_path_factory.mktemp("musicgen_melody")
    model = make_random_musicgen(root / "hf", seed=4, melody=True)
    return model, build_with_cli(root / "hf", root / "onnx")


def _run(package, graph, feeds):
    session = ort.InferenceSession(
        str(package / graph / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def test_graphs_match_transformers(built):
    model, package = built
    generator = open_music_generator(package)
    assert isinstance(generator, PrefixMusicGenerator)
    feeds = generator.tokenize(TEXTS)
    chroma = np.random.default_rng(0).random((2, 3, 12)).astype(np.float32)
    conditioning = _run(package, "text_encoder", {**feeds, "input_features": chroma})
    conditioning = conditioning["conditioning"]
    ids, mask = (torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():  # transformers' forward, step by step
        text = model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        text = model.enc_to_dec_proj(text) * mask[..., None]
        frames = model.audio_enc_to_dec_proj(torch.from_numpy(chroma)).repeat(1, 2, 1)[:, :5]
        expected = torch.cat([frames, text], dim=1)
    np.testing.assert_allclose(conditioning, expected.numpy(), atol=PARITY_ATOL, rtol=0)

    layers, heads = DECODER["num_hidden_layers"], DECODER["num_attention_heads"]
    head_dim = DECODER["hidden_size"] // heads
    cache = {
        f"past_key_values.{i}.decoder.{kind}": np.zeros((2, heads, 0, head_dim), np.float32)
        for i in range(layers)
        for kind in ("key", "value")
    }
    codes = np.random.default_rng(1).integers(0, CODES + 1, (2, K, 6))
    torch_cache, prefix = None, conditioning
    for start, end in ((0, 3), (3, 4), (4, 5), (5, 6)):  # a prefill, then cached steps
        step = codes[:, :, start:end]
        out = _run(package, "decoder", {"input_ids": step, "conditioning": prefix, **cache})
        cache = {
            k.replace("present.", "past_key_values."): v for k, v in out.items() if "present" in k
        }
        with torch.no_grad():
            reference = model.decoder(
                input_ids=torch.from_numpy(step).reshape(2 * K, -1),
                encoder_hidden_states=torch.from_numpy(prefix) if start == 0 else None,
                cache=torch_cache,
                use_cache=True,
            )
        torch_cache, prefix = reference.cache, prefix[:, :0]
        expected = reference.logits.reshape(2, K, -1, CODES)[:, :, -(end - start) :].numpy()
        np.testing.assert_allclose(out["logits"], expected, atol=PARITY_ATOL, rtol=0)


@pytest.mark.parametrize("texts", [TEXTS[:1], TEXTS])
def test_generate_gives_transformers_greedy_music(built, texts, tmp_path):
    model, package = built
    generator = open_music_generator(package)
    feeds = generator.tokenize(texts)
    codes, audio = transformers_music(model, feeds, guidance_scale=3.0, max_new_tokens=7)
    ours = generator.generate_codes(texts, 7, 3.0, Sampling(do_sample=False))
    np.testing.assert_array_equal(ours, codes)
    np.testing.assert_allclose(generator.decode_audio(ours), audio, atol=PARITY_ATOL, rtol=0)
    if len(texts) == 1:  # and through the CLI
        wav = tmp_path / "melody.wav"
        args = ["generate", str(package), texts[0], "--output", str(wav), "--temperature", "0"]
        assert main([*args, "--guidance-scale", "3", "--max-new-tokens", "7"]) == 0
        samples, _ = soundfile.read(wav, dtype="float32")
        np.testing.assert_allclose(samples, audio[0, 0], atol=PARITY_ATOL, rtol=0)


def _tune(seconds: float, rate: int = 6000) -> np.ndarray:
    """A rising three-note tune with a little noise."""
    t = np.arange(int(seconds * rate)) / rate
    pitch = np.where(t < seconds / 3, 440.0, np.where(t < 2 * seconds / 3, 554.4, 659.3))
    noise = 0.05 * np.random.default_rng(0).standard_normal(t.size)
    return (0.5 * np.sin(2 * np.pi * pitch * t) + noise).astype(np.float32)


class TorchSpectrogram:
    """torchaudio's ``Spectrogram(n_fft, win_length, hop_length, power=2, center=True, pad=0,
    normalized=True)`` on ``torch.stft``, as torchaudio defines it: a periodic Hann window,
    reflect padding, the window's L2 norm divided out, the squared magnitude.

    torchaudio itself cannot join this environment (its newest release, 2.11, pins torch
    2.11); the numpy extractor also equalled the real torchaudio 2.11, run by hand."""

    def __init__(self, n_fft, win_length, hop_length, power, center, pad, normalized):
        assert (power, center, pad, normalized) == (2, True, 0, True)
        self.n_fft, self.win_length, self.hop_length = n_fft, win_length, hop_length

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        window = torch.hann_window(self.win_length, dtype=waveform.dtype)
        flat = waveform.reshape(-1, waveform.shape[-1])
        spec = torch.stft(
            flat, self.n_fft, self.hop_length, self.win_length, window, center=True,
            pad_mode="reflect", normalized=False, onesided=True, return_complex=True,
        )  # fmt: skip
        power = (spec / window.pow(2).sum().sqrt()).abs().pow(2)
        return power.reshape(*waveform.shape[:-1], *power.shape[-2:])


def test_chroma_features_match_transformers_extractor(monkeypatch):
    """The numpy chroma equals transformers' ``MusicgenMelodyFeatureExtractor`` within 1e-5
    (its torchaudio spectrogram stood in for by :class:`TorchSpectrogram`)."""
    module = importlib.import_module(
        "transformers.models.musicgen_melody.feature_extraction_musicgen_melody"
    )

    transforms = SimpleNamespace(Spectrogram=TorchSpectrogram)
    monkeypatch.setattr(module, "torchaudio", SimpleNamespace(transforms=transforms), raising=False)
    settings = {k: CHROMA[k] for k in ("sampling_rate", "n_fft", "hop_length", "chunk_length")}
    reference = module.MusicgenMelodyFeatureExtractor(**settings)
    ours = ChromaFeatureExtractor(**settings)
    # Two lengths padded together, one shorter than n_fft, one cut at chunk_length.
    for clips in ([_tune(0.8), _tune(0.5)[::-1].copy()], [_tune(0.05)], [_tune(1.4)]):
        expected = reference(clips, sampling_rate=6000, return_tensors="np")["input_features"]
        np.testing.assert_allclose(ours(clips), expected, atol=1e-5, rtol=0)
    # The power spectrogram under the one-hot rows, which decide the chroma's argmax.
    clip = _tune(0.5)[None]
    expected = TorchSpectrogram(512, 512, 128, 2, True, 0, True)(torch.from_numpy(clip)).numpy()
    np.testing.assert_allclose(ours.power_spectrogram(clip), expected, rtol=1e-4, atol=1e-5)


def test_generate_to_a_melody_gives_transformers_music(built, tmp_path, capsys):
    model, package = built
    tune = tmp_path / "tune.wav"
    soundfile.write(tune, _tune(0.6), 6000, subtype="FLOAT")
    wav = tmp_path / "music.wav"
    args = ["generate", str(package), TEXTS[0], "--output", str(wav), "--temperature", "0"]
    assert main([*args, "--melody", str(tune), "--max-new-tokens", "7"]) == 0  # guidance 3.0
    samples, _ = soundfile.read(wav, dtype="float32")

    generator = open_music_generator(package)
    chroma = generator.chroma([soundfile.read(tune, dtype="float32")[0]])
    assert chroma.shape == (1, 29, 12) and len(set(chroma[0].argmax(-1))) > 1
    feeds = generator.tokenize(TEXTS[:1])
    features = torch.from_numpy(chroma)
    _, audio = transformers_music(
        model, feeds, input_features=features, guidance_scale=3.0, max_new_tokens=7
    )
    np.testing.assert_allclose(samples, audio[0, 0], atol=PARITY_ATOL, rtol=0)
    _, plain = transformers_music(model, feeds, guidance_scale=3.0, max_new_tokens=7)
    assert plain.shape != audio.shape or np.abs(plain - audio).max() > 1e-3  # the tune counts

    assert main([*args, "--melody", str(tmp_path / "none.wav")]) != 0
    assert "no such file" in capsys.readouterr().err
