"""Kyutai STT (``kyutai_speech_to_text``) against transformers, on a tiny random model.

The model (every parameter perturbed, the Mimi encoder's convolutions and codebooks
spread so that the codes vary: ``codec_cases/mimi.py``'s codec) is saved with its
feature extractor and a word-level tokenizer, and built once with the CLI. Checked:
the audio encoder's codes of a padded batch of two clips equal transformers' Mimi
``encode``; the LM's logits over text and code streams, prefill and a cached step,
within 1e-4 of ``KyutaiSpeechToTextForConditionalGeneration``; ``mobius generate PKG
clip.wav`` prints what transformers' greedy ``generate`` decodes (its default,
``do_sample=False``), with the sliding window crossed, at ``--ep default`` and ``cpu``;
the numpy extractor equals transformers'; ``--validate`` passes and catches a changed
weight; bad input is refused in one line.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import soundfile
import torch
import transformers
from codec_cases.mimi import MIMI

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import (
    PARITY_ATOL,
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    build_with_cli,
    perturb_parameters,
    tiny_tokenizer,
)
from mobius.validate import validate_package
from mobius_audio.kyutai_features import KyutaiFeatures
from mobius_audio.kyutai_stt import KyutaiSpeechToText
from mobius_audio.testing._codec_parity import random_clips, spread_encoder_weights

#: The codec at 300 samples/s (25 code frames/s): the extractor's extra second is 25 steps.
RATE = 300
VOCAB, CODEBOOK_VOCAB, CODEBOOKS = 40, 17, MIMI["num_quantizers"]
LM = dict(
    vocab_size=VOCAB,
    codebook_vocab_size=CODEBOOK_VOCAB,
    num_codebooks=CODEBOOKS,
    audio_bos_token_id=CODEBOOK_VOCAB - 1,
    audio_pad_token_id=VOCAB + CODEBOOKS * CODEBOOK_VOCAB,
    hidden_size=64,  # head_dim 16: ONNX Runtime's GroupQueryAttention rotates in its kernel
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    ffn_dim=64,
    max_position_embeddings=64,
    sliding_window=6,  # crossed by the clip's 20-odd steps
    pad_token_id=3,
    bos_token_id=1,
)
EXTRACTOR = dict(sampling_rate=RATE, audio_silence_prefix_seconds=0.02, audio_delay_seconds=0.03)


def kyutai_config(**changes):
    codec = dict(MIMI, model_type="mimi", sampling_rate=RATE)
    return transformers.KyutaiSpeechToTextConfig(codec_config=codec, **{**LM, **changes})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, extractor, hf_dir, package_dir)``, built once (and ``--ep cpu``: fused ops)."""
    root = tmp_path_factory.mktemp("kyutai")
    torch.manual_seed(0)
    model = transformers.KyutaiSpeechToTextForConditionalGeneration(kyutai_config())
    spread_encoder_weights(model.codec_model)
    perturb_parameters(model)
    model.eval()
    extractor = transformers.KyutaiSpeechToTextFeatureExtractor(**EXTRACTOR)
    model.save_pretrained(root / "hf")
    extractor.save_pretrained(root / "hf")
    tiny_tokenizer(VOCAB, {"<s>": 1}).save_pretrained(root / "hf")
    build_with_cli(root / "hf", root / "onnx-cpu", "--ep", "cpu")
    return model, extractor, root / "hf", build_with_cli(root / "hf", root / "onnx")


def test_codes_and_logits_match_transformers(built):
    model, extractor, _, package = built
    clips = random_clips(
        (250, 180), seed=1
    )  # padded, with the silence and delay: 565 samples, 48 frames
    inputs = extractor(clips, sampling_rate=RATE, return_tensors="np")
    encoder = ort.InferenceSession(str(package / "audio_encoder/model.onnx"))
    codes = encoder.run(None, {"input_values": inputs["input_values"]})[0]
    with torch.no_grad():
        expected = model.codec_model.encode(torch.from_numpy(inputs["input_values"])).audio_codes
    assert np.array_equal(codes, expected.numpy()) and len(np.unique(codes[:, 1])) > 1

    # streams [batch, positions, 1 + codebooks]: random text tokens over the clips' codes
    frames = codes.shape[2]
    assert frames > LM["sliding_window"] + 2
    text = np.random.default_rng(2).integers(0, VOCAB, (2, frames, 1))
    ids = np.concatenate([text, codes.transpose(0, 2, 1)], axis=2).astype(np.int64)
    ids[0, 2, 1:3] = ids[1, 4, 3] = LM["audio_pad_token_id"]  # a padding row takes no offset
    decoder = ort.InferenceSession(str(package / "decoder/model.onnx"))
    names = [o.name for o in decoder.get_outputs()]
    cache = {
        i.name: np.zeros((2, i.shape[1], 0, i.shape[3]), np.float32)
        for i in decoder.get_inputs() if i.name.startswith("past_key_values.")
    }  # fmt: skip
    # A prefill of one window, then cached steps past it (transformers' sliding cache).
    prefill, torch_cache, diffs = LM["sliding_window"], None, []
    for start, end in [(0, prefill), *((p, p + 1) for p in range(prefill, 2 * prefill + 2))]:
        outputs = dict(zip(names, decoder.run(names, {
            "input_ids": ids[:, start:end],
            "attention_mask": np.ones((2, end), np.int64),
            "position_ids": np.tile(np.arange(start, end), (2, 1)),
            **cache,
        }), strict=True))  # fmt: skip
        cache = {
            n.replace("present.", "past_key_values."): v
            for n, v in outputs.items()
            if "present" in n
        }
        with torch.no_grad():
            out = model(
                input_ids=torch.from_numpy(ids[:, start:end]), cache=torch_cache, use_cache=True
            )
        torch_cache = out.past_key_values
        diffs.append(float(np.abs(outputs["logits"] - out.logits.numpy()).max()))
    assert max(diffs) <= PARITY_ATOL, diffs


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_generate_matches_transformers(built, ep, tmp_path, capsys):
    model, extractor, _, package = built
    package = package if ep == "default" else package.parent / "onnx-cpu"
    samples = random_clips((int(0.2 * RATE) + 7,), seed=3)[0]
    path = tmp_path / "clip.wav"
    soundfile.write(str(path), samples, RATE, subtype="FLOAT")
    inputs = extractor(samples, sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        expected = model.generate(**inputs, do_sample=False)[0, 1:].tolist()
    assert len(expected) > 2 * LM["sliding_window"] and len(set(expected)) > 1
    assert KyutaiSpeechToText(package).generate_ids(path) == expected
    capsys.readouterr()
    assert main(["generate", str(package), str(path)]) == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(package)
    assert capsys.readouterr().out.strip() == tokenizer.decode(expected, skip_special_tokens=True)


def test_numpy_features_equal_transformers():
    extractor = transformers.KyutaiSpeechToTextFeatureExtractor(**EXTRACTOR)
    clips = random_clips((300, 211), seed=4)
    for batch in (clips, clips[1:]):
        expected = extractor(batch, sampling_rate=RATE, return_tensors="np")
        got = KyutaiFeatures.from_config(extractor.to_dict())(batch)
        assert got["input_values"].shape == expected["input_values"].shape
        assert np.abs(got["input_values"] - expected["input_values"]).max() <= 1e-5
        assert np.array_equal(got["padding_mask"], expected["padding_mask"])
    with pytest.raises(MobiusError, match="not a KyutaiSpeechToTextFeatureExtractor"):
        KyutaiFeatures.from_config({"feature_extractor_type": "EncodecFeatureExtractor"})


def test_refusals(built, tmp_path, capsys):
    _, _, _, package = built
    for message, config in {
        "num_codebooks 3 must equal the codec's num_quantizers 4": kyutai_config(num_codebooks=3),
        "tie_word_embeddings": kyutai_config(tie_word_embeddings=True),
    }.items():
        source = tmp_path / f"hf-{len(message)}"
        config.save_pretrained(source)
        capsys.readouterr()
        assert main(["build", "--model", str(source), str(tmp_path / "out"), "-q"]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    missing = str(tmp_path / "missing.wav")
    for message, args in {
        "no such file": [],
        "--do-sample: a Kyutai STT package transcribes greedily": ["--do-sample"],
    }.items():
        capsys.readouterr()
        assert main(["generate", str(package), missing, *args]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


def test_frame_size_from_the_codec_when_config_omits_it(built, tmp_path):
    """A config.json without ``frame_size``: the codec's strides times the downsampling's 2."""
    import json
    import shutil

    package = shutil.copytree(built[3], tmp_path / "copy")
    config = json.loads((package / "config.json").read_text())
    assert config.pop("frame_size") == 12
    (package / "config.json").write_text(json.dumps(config))
    assert KyutaiSpeechToText(package).frame_size == 12


def test_validate(built, tmp_path, monkeypatch):
    """Passes; a changed ``lm_head`` fails; without torch the sample runs through the graphs."""
    import shutil

    _, _, hf_dir, package = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), hf_dir)
    assert report.passed and report.tokens_agree is True, report.summary()
    assert report.diffs["logits"] <= PARITY_ATOL
    broken = broken_copy(package, tmp_path / "broken", "decoder/model.onnx", "lm_head.")
    assert_validation_fails(broken, hf_dir)
    assert_smoke_passes(package, hf_dir, monkeypatch, tmp_path / "smoke")
