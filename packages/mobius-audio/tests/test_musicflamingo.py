"""Music Flamingo (``audio-language``): parity with transformers on a batch of two.

The tiny Audio Flamingo 3 of :mod:`_audioflamingo3_tiny` as a ``MusicFlamingoConfig``
(rope_theta 1200, a rotary width of 2 * int(32 * 0.25) = 16 of 32 channels), every
parameter perturbed, built through the CLI; transformers' ``MusicFlamingoProcessor``
makes the batch: two prompts of different lengths (left padded), a 0.55 s clip and a
2.3 s one (three windows: the time embedding's window index runs 0, 1, 2). The audio
graph's states, the prefill logits and four cached greedy steps are within
``PARITY_ATOL`` of PyTorch, the greedy tokens equal.
"""

from __future__ import annotations

import numpy as np
import pytest
from _audioflamingo3_tiny import (
    SPECIAL,
    audio_config,
    clip,
    feature_extractor,
    prompt,
    save_model,
    text_config,
    tokenizer,
)

from mobius.testing import build_with_cli
from mobius_audio.testing._audio_language_parity import compare_audio_language

torch = pytest.importorskip("torch")


def processor():
    """transformers' ``MusicFlamingoProcessor`` over the tiny tokenizer and extractor."""
    from transformers import MusicFlamingoProcessor

    return MusicFlamingoProcessor(feature_extractor(), tokenizer())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(package dir, the transformers model, source dir)``."""
    from transformers import MusicFlamingoConfig, MusicFlamingoForConditionalGeneration

    config = MusicFlamingoConfig(
        audio_config=audio_config(), text_config=text_config(),
        audio_token_id=SPECIAL["<sound>"], audio_bos_token_id=SPECIAL["<|sound_bos|>"],
        audio_eos_token_id=SPECIAL["<|sound_eos|>"], partial_rotary_factor=0.25,
    )  # fmt: skip
    root = tmp_path_factory.mktemp("musicflamingo")
    model = save_model(root / "src", MusicFlamingoForConditionalGeneration, config, processor())
    return build_with_cli(root / "src", root / "out"), model, root / "src"


def test_parity_batch_of_two(built):
    package, model, _ = built
    inputs = processor()(
        text=[prompt("w5"), prompt("w9 w10 w11 w12")], audio=[clip(0.55, 0), clip(2.3, 1)]
    )
    ids = inputs["input_ids"].numpy().astype(np.int64)
    mask = inputs["attention_mask"].numpy().astype(np.int64)
    audio = {
        "input_features": inputs["input_features"].numpy().astype(np.float32),
        "input_features_mask": inputs["input_features_mask"].numpy().astype(np.int64),
    }
    assert mask[0, 0] == 0 and audio["input_features"].shape[0] == 4  # padded; 4 windows
    tower = model.model.audio_tower
    with torch.no_grad():  # the tower's states, each window's real ones, in order
        states = tower(inputs["input_features"], inputs["input_features_mask"]).last_hidden_state
    _, kept = tower._get_feat_extract_output_lengths(inputs["input_features_mask"].sum(-1))
    reference = np.concatenate([states[i, :n].numpy() for i, n in enumerate(kept.tolist())])
    compare_audio_language(model, package, ids, mask, audio, reference).assert_close()


def test_validate_against_transformers(built, tmp_path):
    """The ``--validate`` check (one window, its feature mask) passes the package."""
    import shutil

    from mobius.validate import validate_package

    package, _, source = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), source)
    assert report.passed and report.tokens_agree, report


def make_processor(template: str | None):
    """transformers' ``MusicFlamingoProcessor`` with ``template`` as its chat template."""
    from transformers import MusicFlamingoProcessor

    return MusicFlamingoProcessor(feature_extractor(), tokenizer(), chat_template=template)


def test_processor_matches_transformers(built):
    """``mobius generate``'s processor gives transformers' ids (the audio tokens between
    ``<|sound_bos|>`` and ``<|sound_eos|>``), features and mask for a clip inside one window
    and one of three windows."""
    from _flamingo_generate import check_processor

    from mobius_audio.audio_language_processor import PROCESSORS

    check_processor(built[0], make_processor, PROCESSORS["musicflamingo"], (0.55, 2.3))


@pytest.fixture(scope="module")
def generating(tmp_path_factory):
    """``(package dir, the transformers model)`` of :mod:`_flamingo_generate`'s model."""
    from _flamingo_generate import build, sub_configs
    from transformers import MusicFlamingoConfig, MusicFlamingoForConditionalGeneration

    config = MusicFlamingoConfig(
        audio_token_id=SPECIAL["<sound>"], audio_bos_token_id=SPECIAL["<|sound_bos|>"],
        audio_eos_token_id=SPECIAL["<|sound_eos|>"], partial_rotary_factor=0.25,
        **sub_configs(),
    )  # fmt: skip
    root = tmp_path_factory.mktemp("musicflamingo_generate")
    return build(root, MusicFlamingoForConditionalGeneration, config, make_processor(None))


def test_generate_through_the_cli(generating, tmp_path, capsys):
    from _flamingo_generate import check_generate

    check_generate(*generating, make_processor, tmp_path, capsys)
