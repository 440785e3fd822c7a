"""``mobius generate DIA "[S1] ..." --codec DAC`` speaks as transformers' Dia does, through the CLI.

A tiny random Dia (``_dia_tiny``, with the hub's sampling settings in its
generation_config.json: guidance 3, top-k, top-p, temperature) and the tiny DAC its
three channels index are built once each with the CLI. With sampling off
(``--temperature 0``; transformers' ``generate(do_sample=False)``, which still applies
guidance and its top-k), the WAV equals ``DiaProcessor.batch_decode`` of
transformers' codes within 1e-4; for a batch of two texts of different lengths the
delayed codes are EQUAL to ``generate``'s, with guidance and without. Sampling is
reproducible from ``--seed``. The byte tokenizer and the sampling filters equal
transformers'; bad input gets a one-line error.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch
import transformers
from _cli import one_line_error
from _dia_tiny import DIA, make_random_dia
from codec_cases.dac import DAC

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.dia_generate import DiaGenerator, DiaSampling, tokenize
from mobius_audio.dia_sampling import top_k_mask, top_p_mask
from mobius_audio.testing._codec_parity import make_random_codec

TEXT = "[S1] Hello there. [S2] Hi!"
TEXTS = [TEXT, "[S1] Yes."]
DECODER = DIA["decoder_config"]
IDS = dict(
    bos_token_id=DECODER["bos_token_id"],
    pad_token_id=DECODER["pad_token_id"],
    delay_pattern=DIA["delay_pattern"],
)
FRAMES = 40  # channel 0 of the tiny model ends by itself for TEXTS[1], not for TEXT


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, processor, dia_package, dac_package)``."""
    root = tmp_path_factory.mktemp("dia")
    model = make_random_dia(root / "hf")
    dac = make_random_codec(transformers.AutoConfig.for_model("dac", **DAC))
    dac.save_pretrained(root / "dac_hf")
    rate = DAC["sampling_rate"]
    transformers.DacFeatureExtractor(hop_length=6, sampling_rate=rate).save_pretrained(
        root / "dac_hf"
    )
    features = transformers.DiaFeatureExtractor(sampling_rate=rate, hop_length=6)
    processor = transformers.DiaProcessor(features, transformers.DiaTokenizer(), dac)
    dia_package = build_with_cli(root / "hf", root / "onnx")
    return model, processor, dia_package, build_with_cli(root / "dac_hf", root / "dac")


def transformers_codes(built, texts, **generate):
    """transformers' delayed codes ``[batch, 1 + frames, channels]`` with sampling off."""
    model, processor, _, _ = built
    inputs = processor(text=texts, eos_token_id=DECODER["eos_token_id"], **IDS)
    with torch.no_grad():
        return model.generate(**inputs, max_new_tokens=FRAMES, do_sample=False, **generate)


def run(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main([*map(str, args)])
    return code, capsys.readouterr().err


def test_greedy_wav_is_transformers_decoded_codes(built, tmp_path, capsys):
    _, processor, package, dac = built
    out = tmp_path / "out.wav"
    args = ["generate", package, TEXT, "--codec", dac, "--temperature", "0"]
    code, err = run(capsys, *args, "--max-new-tokens", FRAMES, "--output", out)
    assert code == 0, err
    codes = transformers_codes(built, [TEXT])
    (expected,) = processor.batch_decode(codes, **IDS)
    samples, rate = soundfile.read(str(out), dtype="float32")
    assert rate == DAC["sampling_rate"] and samples.shape == tuple(expected.shape)
    assert np.abs(samples - expected.numpy()).max() <= PARITY_ATOL
    frames = int((codes[0, :, 0] != DECODER["pad_token_id"]).sum()) - 2  # less bos and eos
    assert f"({frames} frames)" in err


@pytest.mark.parametrize("guidance", [3.0, None])
def test_batch_codes_equal_transformers(built, guidance):
    _, _, package, dac = built
    expected = transformers_codes(built, TEXTS, guidance_scale=guidance).numpy()
    sampling = DiaSampling(do_sample=False, top_k=6, guidance_scale=guidance)
    codes = DiaGenerator(package, dac).generate_codes(TEXTS, sampling, FRAMES)
    np.testing.assert_array_equal(codes, expected)


def test_sampling_is_seeded(built, tmp_path, capsys):
    _, _, package, dac = built
    waves = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = tmp_path / f"{name}.wav"
        args = ["generate", package, TEXT, "--codec", dac, "--seed", seed, "--output", out]
        assert run(capsys, *args, "--max-new-tokens", FRAMES)[0] == 0
        waves.append(soundfile.read(str(out), dtype="float32")[0])
    np.testing.assert_array_equal(waves[0], waves[1])
    assert waves[0].shape != waves[2].shape or not np.array_equal(waves[0], waves[2])


def test_tokenizer_and_filters_equal_transformers():
    text = "[S1] Héllo 😀 <pad>[S2]x[S3]"
    assert tokenize(text) == transformers.DiaTokenizer()(text)["input_ids"]
    scores = np.random.default_rng(0).standard_normal((4, 3, 20)).astype(np.float32)
    flat = torch.tensor(scores.reshape(-1, 20))
    top_k = transformers.TopKLogitsWarper(top_k=5)(None, flat.clone())
    top_p = transformers.TopPLogitsWarper(top_p=0.7)(None, flat.clone())
    np.testing.assert_array_equal(top_k_mask(scores, 5).reshape(-1, 20), top_k.isfinite().numpy())
    np.testing.assert_array_equal(top_p_mask(scores, 0.7).reshape(-1, 20), top_p.isfinite().numpy())


def test_bad_input_is_one_line(built, tmp_path, capsys):
    _, _, package, dac = built
    out = str(tmp_path / "x.wav")
    base = ["generate", package, TEXT, "--output", out]
    assert "--codec DAC_DIR" in one_line_error(capsys, *base)
    assert "not an audio-codec package" in one_line_error(capsys, *base, "--codec", package)
    for frames in (3, 4000):
        error = one_line_error(capsys, *base, "--codec", dac, "--max-new-tokens", frames)
        assert f"--max-new-tokens {frames}" in error and "longest delay (3)" in error
    assert "--guidance-scale 0.5" in one_line_error(
        capsys, *base, "--codec", dac, "--guidance-scale", 0.5
    )
    assert "Dia reads 1 to" in one_line_error(capsys, "generate", package, "", "--codec", dac)
