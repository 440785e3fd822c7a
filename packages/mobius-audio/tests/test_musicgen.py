"""MusicGen: graph parity with transformers, and ``mobius generate`` against its ``generate``.

One tiny random MusicGen (every parameter perturbed; T5 text encoder, a 3-codebook
decoder wider than the text encoder, a tiny EnCodec) is built once with the CLI.
Parity at fp32 on two texts of different lengths (left-padded, as the package's
tokenizer pads): the text states, the decoder's prefill and cached steps (with the
guidance batch's empty-prompt rows) and the audio decoder, within 1e-4. Generation
with sampling off gives transformers' codes and audio (``generate(do_sample=False)``
with and without classifier-free guidance); sampling is reproducible per seed.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import soundfile
import torch
from _musicgen_tiny import CODES, DECODER, ENCODEC, T5, make_random_musicgen
from transformers import EncodecConfig, MusicgenConfig, MusicgenDecoderConfig, T5Config

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import PARITY_ATOL, assert_validation_fails, broken_copy, build_with_cli
from mobius_audio.music import MusicGenerator, Sampling
from mobius_audio.testing._music_parity import transformers_music

TEXTS = ["w3 w5 w7 w9 w11", "w4 w6"]
K = DECODER["num_codebooks"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, package)``, built with ``--validate`` (the source is ``package/../hf``)."""
    root = tmp_path_factory.mktemp("musicgen")
    model = make_random_musicgen(root / "hf", seed=2)
    return model, build_with_cli(root / "hf", root / "onnx", "--validate")


def _session(package, graph):
    return ort.InferenceSession(
        str(package / graph / "model.onnx"), providers=["CPUExecutionProvider"]
    )


def _run(session, feeds):
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def _torch_text_states(model, feeds):
    ids, mask = (torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():
        states = model.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return model.enc_to_dec_proj(states) * mask[..., None]


def test_graphs_match_transformers(built):
    model, package = built
    feeds = MusicGenerator(package).tokenize(TEXTS)
    assert feeds["attention_mask"].sum(1).tolist() == [5, 2]

    encoded = _run(_session(package, "text_encoder"), feeds)
    states = _torch_text_states(model, feeds)
    np.testing.assert_allclose(
        encoded["last_hidden_state"], states.numpy(), atol=PARITY_ATOL, rtol=0
    )

    # The guidance batch: the two texts, then two rows with no text (zero states, zero mask).
    cross = {
        k.replace("present.", "past_key_values."): v for k, v in encoded.items() if "present" in k
    }
    source = {"encoder_attention_mask": feeds["attention_mask"], **cross}
    source = {k: np.concatenate([v, np.zeros_like(v)]) for k, v in source.items()}
    torch_states = torch.cat([states, torch.zeros_like(states)])
    torch_mask = torch.from_numpy(source["encoder_attention_mask"])

    decoder = _session(package, "decoder")
    layers, heads = DECODER["num_hidden_layers"], DECODER["num_attention_heads"]
    head_dim = DECODER["hidden_size"] // heads
    cache = {
        f"past_key_values.{i}.decoder.{kind}": np.zeros((4, heads, 0, head_dim), np.float32)
        for i in range(layers)
        for kind in ("key", "value")
    }
    codes = np.random.default_rng(0).integers(0, CODES + 1, (4, K, 7))  # the pad id included
    torch_cache = None
    for start, end in ((0, 4), (4, 5), (5, 6), (6, 7)):  # a prefill, then cached steps
        step = codes[:, :, start:end]
        out = _run(decoder, {"input_ids": step, **source, **cache})
        cache = {
            k.replace("present.", "past_key_values."): v for k, v in out.items() if "present" in k
        }
        with torch.no_grad():
            reference = model.decoder(
                input_ids=torch.from_numpy(step).reshape(4 * K, -1),
                encoder_hidden_states=torch_states,
                encoder_attention_mask=torch_mask,
                cache=torch_cache,
                use_cache=True,
            )
        torch_cache = reference.cache
        expected = reference.logits.reshape(4, K, end - start, -1).numpy()
        assert np.isfinite(expected).all()
        np.testing.assert_allclose(out["logits"], expected, atol=PARITY_ATOL, rtol=0)

    frames = np.random.default_rng(1).integers(0, CODES, (2, K, 5))
    (audio,) = _session(package, "audio_decoder").run(None, {"audio_codes": frames})
    with torch.no_grad():
        expected = model.audio_encoder.decode(torch.from_numpy(frames)[None], [None]).audio_values
    assert audio.shape == tuple(expected.shape)
    np.testing.assert_allclose(audio, expected.numpy(), atol=PARITY_ATOL, rtol=0)


def test_generate_cli_gives_transformers_greedy_music(built, tmp_path, capsys):
    model, package = built
    wav = tmp_path / "out.wav"
    args = ["generate", str(package), TEXTS[0], "--output", str(wav), "--temperature", "0"]
    assert main([*args, "--guidance-scale", "3", "--max-new-tokens", "9", "--seed", "0"]) == 0
    assert "wrote" in capsys.readouterr().err
    samples, rate = soundfile.read(wav, dtype="float32")
    assert rate == 6000

    generator = MusicGenerator(package)
    feeds = generator.tokenize(TEXTS[:1])
    codes, audio = transformers_music(model, feeds, guidance_scale=3.0, max_new_tokens=9)
    assert codes.shape == (1, K, 9 + 1 - K)
    greedy = Sampling(do_sample=False)
    np.testing.assert_array_equal(generator.generate_codes(TEXTS[:1], 9, 3.0, greedy), codes)
    assert samples.shape == (audio.shape[-1],)
    np.testing.assert_allclose(samples, audio[0, 0], atol=PARITY_ATOL, rtol=0)


@pytest.mark.parametrize("scale", [3.0, None])
def test_a_batch_of_two_texts_gives_transformers_codes(built, scale):
    model, package = built
    generator = MusicGenerator(package)
    feeds = generator.tokenize(TEXTS)
    settings = {"guidance_scale": scale} if scale else {"guidance_scale": 1.0}
    codes, audio = transformers_music(model, feeds, max_new_tokens=8, **settings)
    ours = generator.generate_codes(TEXTS, 8, scale, Sampling(do_sample=False))
    np.testing.assert_array_equal(ours, codes)
    np.testing.assert_allclose(generator.decode_audio(ours), audio, atol=PARITY_ATOL, rtol=0)


def test_sampling_is_seeded(built, tmp_path):
    _, package = built

    def music(seed: int, name: str) -> np.ndarray:
        wav = tmp_path / name
        args = ["generate", str(package), TEXTS[1], "--output", str(wav), "--seed", str(seed)]
        assert main([*args, "--max-new-tokens", "8"]) == 0
        return soundfile.read(wav, dtype="float32")[0]

    first = music(0, "a.wav")
    np.testing.assert_array_equal(music(0, "b.wav"), first)
    assert np.abs(music(1, "c.wav") - first).max() > 1e-3


def test_bad_input_is_refused_in_one_line(built, tmp_path, capsys):
    _, package = built
    args = ["generate", str(package), "w3", "--output", str(tmp_path / "x.wav")]
    assert main([*args, "--max-new-tokens", "3"]) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "--max-new-tokens 3 is too few" in lines[0], lines
    assert main([*args, "--melody", str(tmp_path / "tune.wav")]) != 0
    assert "only MusicGen-Melody takes a melody" in capsys.readouterr().err
    with pytest.raises(MobiusError, match="not a text-to-music package"):
        MusicGenerator(tmp_path)


def test_stereo_interleaves_the_channels_codebooks(tmp_path):
    """``audio_channels=2``: codebook pairs share a delay; each channel's half is decoded alone."""
    model = make_random_musicgen(tmp_path / "hf", seed=3, num_codebooks=2 * K, audio_channels=2)
    generator = MusicGenerator(build_with_cli(tmp_path / "hf", tmp_path / "onnx"))
    feeds = generator.tokenize(TEXTS)
    codes, audio = transformers_music(model, feeds, guidance_scale=3.0, max_new_tokens=5)
    ours = generator.generate_codes(TEXTS, 5, 3.0, Sampling(do_sample=False))
    assert ours.shape == (2, 2 * K, 5 + 1 - K)
    np.testing.assert_array_equal(ours, codes)
    music = generator.decode_audio(ours)
    assert music.shape[1] == 2
    np.testing.assert_allclose(music, audio, atol=PARITY_ATOL, rtol=0)


def test_a_decoder_that_does_not_fit_its_codec_is_refused(tmp_path, capsys):

    source = tmp_path / "hf"
    decoder = MusicgenDecoderConfig(**{**DECODER, "vocab_size": 20, "pad_token_id": 20})
    config = MusicgenConfig(
        text_encoder=T5Config(**T5).to_dict(),
        audio_encoder=EncodecConfig(**ENCODEC).to_dict(),
        decoder=decoder.to_dict(),
    )
    config.save_pretrained(source)
    args = ["build", "--model", str(source), str(tmp_path / "out"), "-q", "--no-weights"]
    assert main(args) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "vocab_size 20 is not the EnCodec codebook_size 16" in lines[0]


def test_validate_compares_greedy_music_with_transformers(built, tmp_path):
    _, package = built
    validation = json.loads((package / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers MusicgenForConditionalGeneration"
    assert validation["tokens_agree"] is True
    assert validation["diffs"]["audio_values"] <= PARITY_ATOL
    source = package.parent / "hf"
    broken = broken_copy(package, tmp_path / "broken", "audio_decoder/model.onnx", "decoder.layers")
    assert_validation_fails(broken, source)
