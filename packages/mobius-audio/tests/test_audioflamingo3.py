"""Audio Flamingo 3 (``audio-language``): parity with transformers on a batch of two.

One tiny random model (:mod:`_audioflamingo3_tiny`: every parameter perturbed) built
through the CLI; transformers' ``AudioFlamingo3Processor`` makes the batch: two prompts
of different lengths (left padded), one clip of 0.55 s and one of 1.5 s (two windows,
whose tokens follow one another). The audio graph's features, the prefill logits and
four cached greedy steps are within ``PARITY_ATOL`` of PyTorch, the greedy tokens equal.
"""

from __future__ import annotations

import numpy as np
import pytest
from _audioflamingo3_tiny import clip, processor, prompt, save_model

from mobius.testing import build_with_cli
from mobius_audio.testing._audio_language_parity import compare_audio_language

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(package dir, the transformers model, source dir)``."""
    root = tmp_path_factory.mktemp("audioflamingo3")
    model = save_model(root / "src")
    return build_with_cli(root / "src", root / "out"), model, root / "src"


def batch(made, texts, clips):
    """The processor's ids, mask and audio inputs (by the graph's names) as numpy."""
    inputs = made(text=texts, audio=clips)
    ids = inputs["input_ids"].numpy().astype(np.int64)
    mask = inputs["attention_mask"].numpy().astype(np.int64)
    audio = {
        "input_features": inputs["input_features"].numpy().astype(np.float32),
        "input_features_mask": inputs["input_features_mask"].numpy().astype(np.int64),
    }
    return ids, mask, audio


def test_parity_batch_of_two(built):
    package, model, _ = built
    ids, mask, audio = batch(
        processor(), [prompt("w5"), prompt("w9 w10 w11 w12")], [clip(0.55, 0), clip(1.5, 1)]
    )
    assert mask[0, 0] == 0 and audio["input_features"].shape[0] == 3  # padded; 3 windows
    feeds = {name: torch.from_numpy(value) for name, value in audio.items()}
    with torch.no_grad():
        reference = model.get_audio_features(**feeds).pooler_output.numpy()
    compare_audio_language(model, package, ids, mask, audio, reference).assert_close()


def test_validate_against_transformers(built, tmp_path):
    """The ``--validate`` check (one window, its feature mask) passes the package."""
    import shutil

    from mobius.validate import validate_package

    package, _, source = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), source)
    assert report.passed and report.tokens_agree, report


def make_processor(template: str | None):
    """transformers' ``AudioFlamingo3Processor`` with ``template`` as its chat template."""
    from _audioflamingo3_tiny import feature_extractor, tokenizer
    from transformers import AudioFlamingo3Processor

    return AudioFlamingo3Processor(feature_extractor(), tokenizer(), chat_template=template)


@pytest.fixture(scope="module")
def generating(tmp_path_factory):
    """``(package dir, the transformers model)`` of :mod:`_flamingo_generate`'s model."""
    from _audioflamingo3_tiny import SPECIAL
    from _flamingo_generate import build, sub_configs
    from transformers import (
        AudioFlamingo3Config,
        AudioFlamingo3ForConditionalGeneration,
    )

    config = AudioFlamingo3Config(audio_token_id=SPECIAL["<sound>"], **sub_configs())
    root = tmp_path_factory.mktemp("audioflamingo3_generate")
    return build(root, AudioFlamingo3ForConditionalGeneration, config, make_processor(None))


def test_processor_matches_transformers(built):
    """``mobius generate``'s processor gives transformers' ids, features and mask for a clip
    inside one window and one of two windows."""
    from _flamingo_generate import check_processor

    from mobius_audio.audio_language_processor import PROCESSORS

    check_processor(built[0], make_processor, PROCESSORS["audioflamingo3"], (0.55, 1.5))


def test_generate_through_the_cli(generating, tmp_path, capsys):
    from _flamingo_generate import check_generate

    check_generate(*generating, make_processor, tmp_path, capsys)


def test_python_m_mobius_generate(generating, tmp_path):
    from _flamingo_generate import check_python_m_mobius

    check_python_m_mobius(*generating, make_processor, tmp_path)
