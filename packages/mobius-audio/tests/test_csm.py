"""CSM's graphs and ``mobius generate`` against transformers' CsmForConditionalGeneration.

A tiny random CSM (``_csm_tiny``: every parameter perturbed, llama3 rotary, grouped
heads, four codebooks over a tiny Mimi) is built once with the CLI (and once more with
``--ep cpu``). At fp32, within
1e-4 of PyTorch: the backbone's prefill of a batch of two prompts of different lengths
(left-padded) and three cached frame steps (logits and the last hidden state), the
depth decoder's first step ``[0, code0]`` and cached steps, Mimi's encode (the same
codes) and decode of a batch of codes (:mod:`mobius_audio.testing._csm_parity`). Through the CLI with sampling off (``--temperature 0``), the WAV equals
transformers' ``generate(do_sample=False, depth_decoder_do_sample=False,
output_audio=True)`` (the package's generation config samples, as the hub's does); for
the batch of two the frames are EQUAL to ``generate``'s, and a context turn with audio
(``--context``) gives transformers' audio for the same merged input. Sampling is reproducible from
``--seed``. ``--validate`` passes the package and fails a broken copy. Bad input gets a
one-line error; a config CSM cannot run is refused.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import soundfile
import torch
from _cli import one_line_error
from _csm_tiny import AUDIO, AUDIO_EOS, CSM, make_random_csm

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import (
    PARITY_ATOL,
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    build_with_cli,
)
from mobius.validate import validate_package
from mobius_audio.csm_generate import CsmGenerator, Sampling
from mobius_audio.testing._codec_parity import random_clips
from mobius_audio.testing._csm_parity import CLIP_SAMPLES, compare_csm, left_padded

PROMPTS = ["[0] w3 w7 w9 w11 w4", "[1] w5"]
FRAMES = 6
CLIP = CLIP_SAMPLES  # 15 Mimi frames of 12 samples, the last one short
GREEDY = Sampling(do_sample=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(torch_model, package_dir, generator)``: the tiny CSM, built once."""
    root = tmp_path_factory.mktemp("csm")
    model = make_random_csm(root / "hf")
    package = build_with_cli(root / "hf", root / "onnx")
    return model, package, CsmGenerator(package)


@pytest.fixture(scope="module")
def parity(built):
    """:func:`compare_csm` on the batch of :data:`PROMPTS` (prefill and three frames)."""
    model, _, csm = built
    return compare_csm(model, csm, [csm.prompt_ids(p) for p in PROMPTS]).diffs


@pytest.mark.parametrize(
    "outputs",
    [("logits", "last_hidden_state"), ("depth_logits",), ("audio_codes", "audio_values")],
    ids=["backbone", "depth_decoder", "codec"],
)
def test_graphs_match_transformers(parity, outputs):
    measured = {name: parity[name] for name in outputs}
    assert max(measured.values()) <= PARITY_ATOL, measured
    assert "present.0.key" not in parity  # the backbone cache's shape is transformers'


def test_cpu_ep_build_matches_transformers(built, tmp_path):
    """``--ep cpu``: ONNX Runtime's fused attention and norms, the same parity."""
    model, package, _ = built
    csm = CsmGenerator(build_with_cli(package.parent / "hf", tmp_path / "cpu", "--ep", "cpu"))
    diffs = compare_csm(model, csm, [csm.prompt_ids(p) for p in PROMPTS]).diffs
    assert max(diffs.values()) <= PARITY_ATOL, diffs


def test_validate(built, tmp_path, monkeypatch):
    """--validate passes the package, fails one with a changed weight, smoke-runs without torch."""
    _, package, _ = built
    source = package.parent / "hf"
    report = validate_package(package, source)
    assert report.passed and {"logits", "depth_logits", "audio_values"} <= set(report.diffs)
    broken = broken_copy(package, tmp_path / "broken", "depth_decoder/model.onnx", "codebooks_head")
    assert_validation_fails(broken, source)
    assert_smoke_passes(package, source, monkeypatch, tmp_path / "smoke")


def transformers_generate(model, csm, prompts, **kwargs):
    ids, mask, _ = left_padded([csm.prompt_ids(p) for p in prompts])
    with torch.no_grad():
        return model.generate(
            input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=FRAMES,
            do_sample=False, depth_decoder_do_sample=False, **kwargs,
        )  # fmt: skip


def run(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main([*map(str, args)])
    return code, capsys.readouterr().err


def test_greedy_wav_is_transformers_audio(built, tmp_path, capsys):
    model, package, csm = built
    out = tmp_path / "out.wav"
    args = ["generate", package, PROMPTS[0], "--temperature", "0", "--max-new-tokens", FRAMES]
    code, err = run(capsys, *args, "--output", out)
    assert code == 0, err
    (expected,) = transformers_generate(model, csm, PROMPTS[:1], output_audio=True)
    samples, rate = soundfile.read(str(out), dtype="float32")
    assert rate == CSM["codec_config"]["sampling_rate"] and samples.shape == tuple(expected.shape)
    assert np.abs(samples - expected.numpy()).max() <= PARITY_ATOL
    assert f"({FRAMES} frames)" in err


def test_context_turn_with_audio_matches_transformers(built, tmp_path, capsys):
    """``--context TEXT AUDIO``: transformers' input is its processor's layout, the turn's
    text, ``<|AUDIO|>`` per Mimi frame of the clip, ``<|audio_eos|>``, then the prompt."""
    model, package, csm = built
    clip = random_clips((CLIP,), seed=4)[0]
    path = tmp_path / "context.wav"
    soundfile.write(str(path), clip, CSM["codec_config"]["sampling_rate"], subtype="FLOAT")
    out = tmp_path / "out.wav"
    context = ["--context", "[1] w5 w6", path]
    args = ["generate", package, PROMPTS[1], *context, "--temperature", "0", "--output", out]
    code, err = run(capsys, *args, "--max-new-tokens", FRAMES)
    assert code == 0, err
    frames = int(model.codec_model.get_encoded_length(torch.tensor(CLIP)))
    ids = csm.prompt_ids("[1] w5 w6") + [AUDIO] * frames + [AUDIO_EOS] + csm.prompt_ids(PROMPTS[1])
    assert len(csm.prompt_rows(PROMPTS[1], [("[1] w5 w6", clip)])) == len(ids)
    with torch.no_grad():
        (expected,) = model.generate(
            input_ids=torch.tensor([ids]), input_values=torch.tensor(clip[None, None]),
            input_values_cutoffs=torch.tensor([[CLIP]]), max_new_tokens=FRAMES,
            do_sample=False, depth_decoder_do_sample=False, output_audio=True,
        )  # fmt: skip
    samples = soundfile.read(str(out), dtype="float32")[0]
    assert samples.shape == tuple(expected.shape)
    assert np.abs(samples - expected.numpy()).max() <= PARITY_ATOL


def test_batch_frames_equal_transformers(built):
    model, _, csm = built
    expected = transformers_generate(model, csm, PROMPTS).numpy()
    prompts = [csm.prompt_rows(p) for p in PROMPTS]
    frames = csm.generate_codes(prompts, GREEDY, GREEDY, FRAMES)
    np.testing.assert_array_equal(frames, expected)


def test_sampling_is_seeded(built, tmp_path, capsys):
    _, package, _ = built
    waves = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = tmp_path / f"{name}.wav"
        args = ["generate", package, PROMPTS[0], "--seed", seed, "--output", out]
        assert run(capsys, *args, "--max-new-tokens", FRAMES)[0] == 0
        waves.append(soundfile.read(str(out), dtype="float32")[0])
    np.testing.assert_array_equal(waves[0], waves[1])
    assert not np.array_equal(waves[0], waves[2])


def test_bad_input_is_one_line(built, tmp_path, capsys):
    _, package, _ = built
    base = ["generate", package, "--output", str(tmp_path / "x.wav")]
    assert "empty" in one_line_error(capsys, *base[:2], " ", *base[2:])
    error = one_line_error(capsys, *base[:2], PROMPTS[0], *base[2:], "--max-new-tokens", 1000)
    assert "--max-new-tokens 1000" in error
    missing = tmp_path / "missing.wav"
    error = one_line_error(capsys, *base[:2], PROMPTS[0], *base[2:], "--context", "[1] w5", missing)
    assert "no such file" in error and "missing.wav" in error


def test_refuses_more_codebooks_than_the_codec_has():
    from transformers import CsmConfig

    from mobius_audio.models.csm import CsmConfig as MobiusCsmConfig

    depth = dict(CSM["depth_decoder_config"], num_codebooks=5, max_position_embeddings=6)
    config = CsmConfig(**dict(CSM, num_codebooks=5, depth_decoder_config=depth))
    with pytest.raises(ConfigError, match="5 codebooks, but its Mimi codec has 4"):
        MobiusCsmConfig.from_hf(config)


def test_graphs_load_in_onnxruntime_alone(built):
    _, package, _ = built
    for graph in ("backbone", "depth_decoder", "codec_encoder", "codec_decoder"):
        ort.InferenceSession(
            str(package / graph / "model.onnx"), providers=["CPUExecutionProvider"]
        )
