"""Dia's graphs against transformers' DiaForConditionalGeneration on a tiny random model.

A tiny Dia (``_dia_tiny``: every parameter perturbed, grouped self-attention heads,
three delayed channels) is built with the CLI for each ``--ep`` (``default``: the
ONNX ``Attention`` op; ``cpu``: ONNX Runtime's fused kernels). A batch of two texts
of different lengths (right-padded, as DiaProcessor pads them) goes through the encoder
(``last_hidden_state``), then the decoder prefills four frames of codes and takes
four more one frame at a time through both caches; every output within 1e-4 of
PyTorch's at fp32 (:func:`mobius_audio.testing._dia_parity.compare_dia`). ``--validate``
(:mod:`mobius_audio.validate_dia`) passes the package, fails a copy with a changed
weight and smoke-runs without torch. A config whose delay pattern does not match its
channels is refused.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
from _dia_tiny import DIA, make_random_dia
from transformers import DiaConfig

from mobius.errors import ConfigError
from mobius.testing import (
    PARITY_ATOL,
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    build_with_cli,
)
from mobius.validate import validate_package
from mobius_audio.dia_generate import text_batch
from mobius_audio.models.dia import DiaConfig as MobiusDiaConfig
from mobius_audio.testing._dia_parity import compare_dia

TEXTS = ["[S1] Hello there. [S2] Hi!", "[S1] Yes."]
PREFILL, STEPS = 4, 4


@pytest.fixture(scope="module")
def torch_model(tmp_path_factory):
    """``(model, checkpoint_dir)``: the tiny Dia, saved once."""
    root = tmp_path_factory.mktemp("dia")
    return make_random_dia(root / "hf"), root


@pytest.fixture(scope="module", params=["default", "cpu"])
def built(torch_model, request):
    """``(torch_model, encoder_session, decoder_session)`` of a build for each ``--ep``."""
    model, root = torch_model
    package = build_with_cli(root / "hf", root / request.param, "--ep", request.param)
    sessions = [
        ort.InferenceSession(str(package / g / "model.onnx"), providers=["CPUExecutionProvider"])
        for g in ("encoder", "decoder")
    ]
    return model, *sessions


def test_encoder_and_cached_decoder_match_transformers(built):
    model, encoder, decoder = built
    ids, mask = text_batch(TEXTS, 1024)
    result = compare_dia(model, encoder, decoder, ids, mask, prefill=PREFILL, steps=STEPS)
    assert set(result.diffs) == {"last_hidden_state", "logits", "present.0.decoder.key"}
    assert max(result.diffs.values()) <= PARITY_ATOL, result.diffs


def test_validate(torch_model, tmp_path, monkeypatch):
    """--validate passes the package, fails one with a changed weight, smoke-runs without torch."""
    _, root = torch_model
    package = build_with_cli(root / "hf", tmp_path / "onnx")
    report = validate_package(package, root / "hf")
    assert report.passed and set(report.diffs) >= {"last_hidden_state", "logits"}, report.summary()
    broken = broken_copy(package, tmp_path / "broken", "decoder/model.onnx", "logits_dense")
    assert_validation_fails(broken, root / "hf")
    assert_smoke_passes(package, root / "hf", monkeypatch, tmp_path / "smoke")


def test_a_delay_pattern_without_one_delay_per_channel_is_refused():
    config = DiaConfig(**DIA)
    config.delay_pattern = [0, 2]
    with pytest.raises(ConfigError, match="delay_pattern"):
        MobiusDiaConfig.from_hf(config)
