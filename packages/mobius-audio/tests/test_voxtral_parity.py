"""Voxtral (``audio-language``): a tiny random model's package against transformers.

The audio tower reads 16 mel bins over a 40-frame window (``max_source_positions`` 20),
its states stacked by four (``intermediate_size`` 128 over ``hidden_size`` 32): five
tokens a chunk; the text decoder is a two-layer Llama; every parameter is perturbed,
the model saved as the hub lays it out and built through the CLI. A batch of two
prompts of different lengths (left padded), one chunk each: the audio features, the
prefill logits and four cached greedy steps within ``PARITY_ATOL``, the greedy tokens
those of transformers' ``generate(do_sample=False)``.

The source has no ``tekken.json`` (mistral-common's tokenizer: ``test_voxtral_generate.py``
prompts through it), so the ids are laid out by hand as its transcription template lays
them: ``<s>[INST][BEGIN_AUDIO]``, the audio tokens, ``[/INST]``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.testing import build_with_cli
from mobius_audio.testing import check_batch_and_generate, save_perturbed

torch = pytest.importorskip("torch")

AUDIO_TOKEN, BOS, INST, END_INST, BEGIN_AUDIO, PAD = 24, 1, 3, 4, 25, 11
TOKENS_PER_CHUNK = 5


def hf_config():
    from transformers import VoxtralConfig

    audio = dict(
        model_type="voxtral_encoder", hidden_size=32, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_mel_bins=16, max_source_positions=20,
    )  # fmt: skip
    text = dict(
        model_type="llama", vocab_size=128, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        max_position_embeddings=256, rms_norm_eps=1e-5, eos_token_id=2, bos_token_id=BOS,
    )  # fmt: skip
    return VoxtralConfig(audio_config=audio, text_config=text, audio_token_id=AUDIO_TOKEN)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from transformers import VoxtralForConditionalGeneration

    root = tmp_path_factory.mktemp("voxtral")
    return root, save_perturbed(VoxtralForConditionalGeneration, hf_config(), root / "src")


@pytest.fixture(scope="module", params=["default", "cpu"])
def built(source, request):
    """The package at ``--ep default`` (standard ops) and ``--ep cpu`` (ORT's fused ones)."""
    root, model = source
    out = root / f"out-{request.param}"
    return build_with_cli(root / "src", out, "--ep", request.param), model


def prompt(text: list[int]) -> list[int]:
    audio = [AUDIO_TOKEN] * TOKENS_PER_CHUNK
    return [BOS, INST, BEGIN_AUDIO, *audio, *text, END_INST]


def test_parity_batch_of_two(built):
    package, model = built
    rows = [prompt([40]), prompt([41, 42, 43, 44])]
    width = max(map(len, rows))
    ids = np.asarray([[PAD] * (width - len(r)) + r for r in rows], np.int64)
    mask = np.asarray([[0] * (width - len(r)) + [1] * len(r) for r in rows], np.int64)
    rng = np.random.default_rng(0)
    features = rng.uniform(-1, 1, (2, 16, 40)).astype(np.float32)  # log-mel's range
    audio = {"input_features": features}
    check_batch_and_generate(model, package, ids, mask, audio, pad_token_id=PAD)


def test_generate_without_tekken_is_one_line(built, tmp_path, capsys):
    """A source without mistral-common's ``tekken.json`` builds, but its package cannot
    generate (``test_voxtral_generate.py`` generates from one that has it)."""
    from mobius.cli import main

    package, _ = built
    capsys.readouterr()
    assert main(["generate", str(package), "w3"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no tekken.json in {package}" in err


def test_features_of_another_window_are_refused_by_the_graph(built):
    """The audio graph takes the fixed window transformers insists on (2 x 20 frames)."""
    import onnx

    package, _ = built
    graph = onnx.load(str(package / "audio" / "model.onnx"), load_external_data=False).graph
    (features,) = graph.input
    dims = [d.dim_value or d.dim_param for d in features.type.tensor_type.shape.dim]
    assert features.name == "input_features" and dims == ["num_audios", 16, 40]


def test_validate_against_transformers(source, tmp_path):
    """``mobius build --validate`` compares the package with the source in transformers, and
    fails a package with one weight off."""
    import json

    from mobius.cli import main
    from mobius.testing import PARITY_ATOL, assert_validation_fails, broken_copy

    root, _ = source
    out = tmp_path / "validated"
    assert main(["build", "--model", str(root / "src"), str(out), "-q", "--validate"]) == 0
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True and validation["tokens_agree"] is True, validation
    assert validation["reference"] == "transformers VoxtralForConditionalGeneration"
    assert max(validation["diffs"].values()) <= PARITY_ATOL
    broken = broken_copy(out, tmp_path / "broken", "decoder/model.onnx", "mlp")
    assert_validation_fails(broken, root / "src")
