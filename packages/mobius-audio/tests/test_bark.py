"""Bark (``bark-text-to-audio``): each stage's graph and ``mobius generate`` against transformers.

One tiny ``BarkModel`` (every parameter perturbed; ``_bark_tiny``) is built once with the
CLI. The graphs match PyTorch within 1e-4 on a batch of two texts of different lengths
(the semantic and coarse stages' prefill and cached steps, every fine codebook, the
codec). Greedy (``--temperature 0``), ``mobius generate`` writes transformers'
``BarkModel.generate(do_sample=False, fine_temperature=None)`` audio from the same
semantic, coarse and fine codes, with and without a voice preset, and the batch API
equals its ``return_output_lengths=True`` clips. With the package's sampling on, a seed
gives the same audio.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile
import torch
from _bark_tiny import BARK, GENERATION, make_tiny_bark
from transformers import BarkConfig as HFBarkConfig
from transformers.models.bark.generation_configuration_bark import (
    BarkCoarseGenerationConfig,
    BarkFineGenerationConfig,
    BarkSemanticGenerationConfig,
)

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.bark_generate import Bark, VoicePreset, _CausalStage
from mobius_audio.models.bark import BarkConfig

TEXT = "hello there my dog is cute"
TEXTS = ["hello there", "my dog is cute a b c d e f"]  # 2 tokens; 10, cut to 8
FINE = BARK["fine_acoustics_config"]
NEW_TOKENS = 20  # semantic tokens: 60 coarse tokens (10 windows), 30 frames (4 fine blocks)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """``(torch_model, checkpoint_dir)``: the tiny Bark, saved once."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only wait for each other
    root = tmp_path_factory.mktemp("bark")
    yield make_tiny_bark(root / "hf"), root / "hf"
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def built(source):
    """``(torch_model, package)``: the package as ``mobius build`` makes it by default."""
    model, checkpoint = source
    return model, build_with_cli(checkpoint, checkpoint.parent / "onnx")


@pytest.fixture(scope="module")
def greedy_bark(built):
    bark = Bark(built[1])
    bark.settings.override(temperature=0)
    return bark


def _stage_configs(model):
    settings = model.generation_config
    return (
        BarkSemanticGenerationConfig(**settings.semantic_config),
        BarkCoarseGenerationConfig(**settings.coarse_acoustics_config),
        BarkFineGenerationConfig(**settings.fine_acoustics_config),
    )


def torch_codes(model, input_ids, attention_mask, preset=None):
    """transformers' greedy semantic tokens, coarse tokens and fine codes, stage by stage
    as ``BarkModel.generate`` chains them."""
    semantic_config, coarse_config, fine_config = _stage_configs(model)
    history = None if preset is None else {k: torch.tensor(v) for k, v in vars(preset).items()}
    common = dict(
        semantic_generation_config=semantic_config, history_prompt=history, do_sample=False
    )
    with torch.no_grad():
        semantic = model.semantic.generate(
            torch.tensor(input_ids), attention_mask=torch.tensor(attention_mask),
            max_new_tokens=NEW_TOKENS, **common,
        )  # fmt: skip
        coarse = model.coarse_acoustics.generate(
            semantic.clone(), coarse_generation_config=coarse_config,
            codebook_size=GENERATION["codebook_size"], **common,
        )  # fmt: skip
        fine = model.fine_acoustics.generate(
            coarse, coarse_generation_config=coarse_config, fine_generation_config=fine_config,
            codebook_size=GENERATION["codebook_size"], temperature=None, **common,
        )  # fmt: skip
    return semantic.numpy(), coarse.numpy(), fine.numpy()


def our_codes(bark, input_ids, attention_mask, preset=None):
    rng = np.random.default_rng(0)
    semantic = bark.semantic(input_ids, attention_mask, rng, preset, NEW_TOKENS)
    coarse, _ = bark.coarse(semantic, rng, preset)
    return semantic, coarse, bark.fine(coarse, rng, preset)


def torch_audio(model, input_ids, attention_mask, preset=None, **kwargs):
    history = None if preset is None else {k: torch.tensor(v) for k, v in vars(preset).items()}
    with torch.no_grad():
        return model.generate(
            torch.tensor(input_ids), attention_mask=torch.tensor(attention_mask),
            history_prompt=history, do_sample=False, fine_temperature=None,
            semantic_max_new_tokens=NEW_TOKENS, **kwargs,
        )  # fmt: skip


def _preset(seed: int = 0) -> VoicePreset:
    rng = np.random.default_rng(seed)
    return VoicePreset(
        semantic_prompt=rng.integers(0, 40, 30),
        coarse_prompt=rng.integers(0, 16, (2, 45)),
        fine_prompt=rng.integers(0, 16, (4, 45)),
    )


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_stage_graphs_match_transformers(source, built, greedy_bark, ep):
    model, checkpoint = source
    if ep == "default":
        bark = greedy_bark
    else:  # ONNX Runtime's fused attention (GroupQueryAttention) in the causal stages
        bark = Bark(build_with_cli(checkpoint, checkpoint.parent / ep, "--ep", ep))
    rng = np.random.default_rng(1)
    semantic_config, _, _ = _stage_configs(model)
    input_ids, attention_mask = bark.tokenize(TEXTS)
    assert attention_mask.sum(1).tolist() == [2, 8]

    # Semantic: the text (offset, padded) summed with a history, the infer token, 3 steps.
    history = rng.integers(0, 40, 8)
    text = np.where(
        attention_mask == 1,
        input_ids + semantic_config.text_encoding_offset,
        semantic_config.text_pad_token,
    )
    prompt = np.concatenate([text, np.full((2, 1), semantic_config.semantic_infer_token)], 1)
    added = np.concatenate([np.tile(history, (2, 1)), np.full((2, 1), -1)], 1)
    embed = model.semantic.input_embeds_layer
    with torch.no_grad():
        embeds = embed(torch.tensor(prompt))
        embeds[:, :8] += embed(torch.tensor(history))
    _compare_causal(
        model.semantic, _CausalStage(bark.sessions["semantic"]), prompt, rng, 48,
        torch_prefill=dict(inputs_embeds=embeds), onnx_prefill=dict(history_ids=added),
        onnx_step=dict(history_ids=np.full((2, 1), -1, np.int64)),
    )  # fmt: skip
    # Coarse: a plain causal LM.
    _compare_causal(
        model.coarse_acoustics, _CausalStage(bark.sessions["coarse_acoustics"]),
        rng.integers(0, 76, (2, 11)), rng, 76,
    )  # fmt: skip

    # Fine: every predicted codebook over codes with the pad code in the unknown ones.
    codes = rng.integers(0, 17, (2, 16, 4))
    for index in (1, 2, 3):
        (ours,) = bark.sessions["fine_acoustics"].run(
            None, {"input_ids": codes, "codebook_idx": np.array(index, np.int64)}
        )
        with torch.no_grad():
            theirs = model.fine_acoustics(index, torch.tensor(codes)).logits.numpy()
        assert np.abs(ours - theirs).max() <= PARITY_ATOL, index

    # Codec: every codebook, and the first two (a lower bitrate).
    for books in (4, 2):
        codes = rng.integers(0, 16, (2, books, 9))
        with torch.no_grad():
            theirs = model.codec_decode(torch.tensor(codes)).numpy()
        ours = bark.decode(codes)
        assert ours.shape == theirs.shape
        assert np.abs(ours - theirs).max() <= PARITY_ATOL


def _compare_causal(torch_stage, stage, prompt, rng, vocab, torch_prefill=None, **onnx):
    """Prefill logits, the cache, and 3 cached steps' logits within the tolerance."""
    batch = prompt.shape[0]
    stage.start(batch)
    ours = stage(prompt, **onnx.get("onnx_prefill", {}))
    torch_inputs = torch_prefill or dict(input_ids=torch.tensor(prompt))
    with torch.no_grad():
        output = torch_stage(**torch_inputs, use_cache=True)
    assert np.abs(ours - output.logits[:, -1].numpy()).max() <= PARITY_ATOL
    for _ in range(3):
        token = rng.integers(0, vocab, (batch, 1))
        ours = stage(token, **onnx.get("onnx_step", {}))
        with torch.no_grad():
            output = torch_stage(torch.tensor(token), cache=output.cache, use_cache=True)
        assert np.abs(ours - output.logits[:, -1].numpy()).max() <= PARITY_ATOL
        key = stage.cache["past_key_values.1.key"]
        assert np.abs(key - output.cache.layers[1].keys.numpy()).max() <= PARITY_ATOL


def test_generate_greedy_is_transformers(built, greedy_bark, tmp_path, capsys):
    model, package = built
    wav = tmp_path / "out.wav"
    args = ["generate", str(package), TEXT, "--output", str(wav), "--temperature", "0"]
    assert main([*args, "--max-new-tokens", str(NEW_TOKENS)]) == 0
    assert "wrote" in capsys.readouterr().err
    samples, rate = soundfile.read(wav, dtype="float32")
    assert rate == GENERATION["sample_rate"]

    input_ids, attention_mask = greedy_bark.tokenize([TEXT])
    ours, theirs = (
        our_codes(greedy_bark, input_ids, attention_mask),
        torch_codes(model, input_ids, attention_mask),
    )
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine, reference)
    semantic, coarse, fine = ours
    # Meaningful: no early end, several coarse windows and fine blocks.
    assert semantic.shape[1] == NEW_TOKENS and coarse.shape[1] > 6 * 4 and fine.shape[2] > 16
    expected = torch_audio(model, input_ids, attention_mask)[0].numpy()
    assert samples.shape == expected.shape
    assert np.abs(samples - expected).max() <= PARITY_ATOL


def test_batch_and_voice_preset_are_transformers(built, greedy_bark, tmp_path):
    model, package = built
    input_ids, attention_mask = greedy_bark.tokenize(TEXTS)
    for mine, reference in zip(
        our_codes(greedy_bark, input_ids, attention_mask),
        torch_codes(model, input_ids, attention_mask),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, reference)
    clips = greedy_bark.speak(TEXTS, max_new_tokens=NEW_TOKENS)
    audio, lengths = torch_audio(model, input_ids, attention_mask, return_output_lengths=True)
    for clip, reference, length in zip(clips, audio, lengths, strict=True):
        assert clip.shape == (length,)
        assert np.abs(clip - reference[:length].numpy()).max() <= PARITY_ATOL

    # A voice preset through the CLI: its histories in all three stages.
    preset = _preset()
    path = tmp_path / "voice.npz"
    np.savez(path, **vars(preset))
    wav = tmp_path / "voice.wav"
    args = ["generate", str(package), TEXT, "--output", str(wav), "--temperature", "0"]
    assert main([*args, "--max-new-tokens", str(NEW_TOKENS), "--voice-preset", str(path)]) == 0
    samples, _ = soundfile.read(wav, dtype="float32")
    input_ids, attention_mask = greedy_bark.tokenize([TEXT])
    for mine, reference in zip(
        our_codes(greedy_bark, input_ids, attention_mask, preset),
        torch_codes(model, input_ids, attention_mask, preset),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, reference)
    expected = torch_audio(model, input_ids, attention_mask, preset)[0].numpy()
    assert samples.shape == expected.shape
    assert np.abs(samples - expected).max() <= PARITY_ATOL


def test_sampling_is_seeded(built, tmp_path):
    _, package = built
    waves = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        wav = tmp_path / f"{name}.wav"
        args = ["generate", str(package), TEXT, "--output", str(wav), "--seed", str(seed)]
        assert main([*args, "--max-new-tokens", "8"]) == 0
        waves.append(soundfile.read(wav, dtype="float32")[0])
    np.testing.assert_array_equal(waves[0], waves[1])
    assert waves[0].shape != waves[2].shape or np.abs(waves[0] - waves[2]).max() > 1e-3


def _error_of(capsys, args) -> str:
    assert main(args) != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_input_is_refused(built, tmp_path, capsys):
    _, package = built
    base = ["generate", str(package), TEXT, "--output", str(tmp_path / "x.wav")]
    error = _error_of(capsys, [*base, "--voice-preset", str(tmp_path / "missing.npz")])
    assert "no such voice preset file" in error
    cases = {
        "rank.npz": (dict(vars(_preset()), semantic_prompt=np.zeros((2, 3), np.int64)), "1-D"),
        "range.npz": (dict(vars(_preset()), fine_prompt=np.full((4, 5), 99)), "outside 0..15"),
        "rows.npz": (dict(vars(_preset()), coarse_prompt=np.zeros((3, 5), np.int64)), "3 rows"),
        "floats.npz": (dict(vars(_preset()), semantic_prompt=np.zeros(4)), "integer"),
        "partial.npz": ({"semantic_prompt": np.zeros(4, np.int64)}, "no coarse_prompt"),
    }
    for name, (arrays, reason) in cases.items():
        np.savez(tmp_path / name, **arrays)
        error = _error_of(capsys, [*base, "--voice-preset", str(tmp_path / name)])
        assert reason in error and name in error, error
    (tmp_path / "junk.npz").write_text("not a zip")
    assert "cannot read" in _error_of(capsys, [*base, "--voice-preset", str(tmp_path / "junk.npz")])
    assert "nothing to speak" in _error_of(capsys, ["generate", str(package), "  "])


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (dict(semantic_config=dict(BARK["semantic_config"], num_heads=3)), "multiple of 3 heads"),
        (dict(fine_acoustics_config=dict(FINE, output_vocab_size=21)), "tied heads"),
        (dict(fine_acoustics_config=dict(FINE, n_codes_total=5)), "the codec has 4"),
        (dict(fine_acoustics_config=dict(FINE, n_codes_given=4)), "n_codes_given 4"),
        (dict(codec_config=dict(BARK["codec_config"], audio_channels=2)), "mono"),
    ],
)
def test_configs_it_cannot_build_are_refused(change, reason):
    with pytest.raises(ConfigError, match=reason):
        BarkConfig.from_hf(HFBarkConfig(**{**BARK, **change}))


def test_package_settings_are_checked(built, tmp_path, capsys):
    _, package = built
    for key, value, reason in (
        ("text_encoding_offset", 1000, "do not match"),
        ("max_input_semantic_length", "8", "is not a non-negative number"),
    ):
        broken = tmp_path / key
        shutil.copytree(package, broken)
        settings = json.loads((broken / "generation_config.json").read_text())
        settings["semantic_config"][key] = value
        (broken / "generation_config.json").write_text(json.dumps(settings))
        error = _error_of(capsys, ["generate", str(broken), TEXT, "--output", str(tmp_path / "x")])
        assert reason in error, error
