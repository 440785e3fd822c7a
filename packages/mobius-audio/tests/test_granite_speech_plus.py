"""Granite Speech Plus (``audio-language``): parity with transformers on a batch of two.

The tiny Granite Speech of :mod:`_granite_speech_tiny` as a ``GraniteSpeechPlusConfig``
whose encoder gives the projector ``input_linear``'s states and block 1's (the mid-layer
block, its CTC residual added) beside the final ones (``cat_hidden_layers`` [0, 1]: a
Q-Former reading 96 = 3 * 32 features), every parameter perturbed, built through the
CLI; transformers' ``GraniteSpeechProcessor`` makes the batch (two prompts, left padded;
clips of 0.45 s and 1 s). The audio graph's features, the prefill logits and four cached
greedy steps are within ``PARITY_ATOL`` of PyTorch, the greedy tokens equal.
"""

from __future__ import annotations

import numpy as np
import pytest
from _granite_speech_tiny import clip, hf_config, save_model, tokenizer, transformers_processor

from mobius.testing import build_with_cli
from mobius_audio.testing._audio_language_parity import compare_audio_language

torch = pytest.importorskip("torch")
AUDIO = "<|audio|>"


def plus_config():
    from transformers import GraniteSpeechPlusConfig

    base = hf_config().to_dict()
    encoder = dict(base["encoder_config"], model_type="granite_speech_plus_encoder")
    encoder["cat_hidden_layers"] = [0, 1]
    projector = dict(base["projector_config"], encoder_hidden_size=3 * encoder["hidden_dim"])
    return GraniteSpeechPlusConfig(
        encoder_config=encoder, projector_config=projector, text_config=base["text_config"],
        audio_token_index=base["audio_token_index"], has_lora_adapter=False,
        window_size=base["window_size"], downsample_rate=base["downsample_rate"],
        tie_word_embeddings=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def hf_processor():
    """transformers' ``GraniteSpeechProcessor`` (its extractor's torchaudio stood in for)."""
    with pytest.MonkeyPatch.context() as patch:
        yield transformers_processor(patch)


@pytest.fixture(scope="module")
def built(tmp_path_factory, hf_processor):
    """``(package dir, the transformers model, source dir)``."""
    from transformers import GraniteSpeechPlusForConditionalGeneration

    root = tmp_path_factory.mktemp("granite_speech_plus")
    model = save_model(
        root / "src", hf_processor.audio_processor,
        GraniteSpeechPlusForConditionalGeneration, plus_config(),
    )  # fmt: skip
    return build_with_cli(root / "src", root / "out"), model, root / "src"


def chat(prompt: str) -> str:
    messages = [{"role": "user", "content": AUDIO + prompt}]
    return tokenizer().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_parity_batch_of_two(built, hf_processor):
    package, model, _ = built
    clips = [torch.from_numpy(clip(0.45, 0)), torch.from_numpy(clip(1.0, 1))]
    inputs = hf_processor(
        text=[chat("w5"), chat("w9 w10 w11 w12")], audio=clips, return_tensors="pt", padding=True
    )
    ids = inputs["input_ids"].numpy().astype(np.int64)
    mask = inputs["attention_mask"].numpy().astype(np.int64)
    assert mask[0, 0] == 0 and mask.shape[0] == 2  # different lengths, left padded
    selected = inputs["input_features_mask"].numpy()
    assert not selected.all()  # the shorter clip's tokens are fewer
    audio = {"input_features": inputs["input_features"].numpy(), "input_features_mask": selected}
    with torch.no_grad():
        projected = model.get_audio_features(inputs["input_features"]).pooler_output
    reference = projected.numpy()[selected]
    compare_audio_language(model, package, ids, mask, audio, reference).assert_close()


def test_lora_adapter_is_merged(tmp_path, hf_processor):
    """With ``has_lora_adapter`` and the adapter beside it (as Granite Speech keeps one), the
    build merges it: parity with transformers running the adapter, as it does with audio."""
    pytest.importorskip("peft", reason="peft makes the reference adapter (a test dependency)")
    from _granite_speech_tiny import save_adapted_model
    from transformers import GraniteSpeechPlusForConditionalGeneration

    model = save_adapted_model(
        tmp_path / "src", hf_processor.audio_processor,
        model_class=GraniteSpeechPlusForConditionalGeneration, config=plus_config(),
    )  # fmt: skip
    package = build_with_cli(tmp_path / "src", tmp_path / "out")
    inputs = hf_processor(text=[chat("w5")], audio=[torch.from_numpy(clip(0.6, 2))],
                          return_tensors="pt")  # fmt: skip
    ids = inputs["input_ids"].numpy().astype(np.int64)
    audio = {k: inputs[k].numpy() for k in ("input_features", "input_features_mask")}
    compare_audio_language(model, package, ids, np.ones_like(ids), audio, None).assert_close()


def test_validate_against_transformers(built, tmp_path):
    """The ``--validate`` check (Granite Speech's sample features) passes the package."""
    import shutil

    from mobius.validate import validate_package

    package, _, source = built
    report = validate_package(shutil.copytree(package, tmp_path / "copy"), source)
    assert report.passed and report.tokens_agree, report


def test_processor_matches_transformers(built, hf_processor):
    """``mobius generate``'s processor (Granite Speech's, as transformers maps
    ``granite_speech_plus`` to ``GraniteSpeechProcessor``) gives its ids, features and mask
    for two clips of different lengths."""
    from transformers import AutoTokenizer

    from mobius_audio.audio_language_processor import PROCESSORS

    package, _, _ = built
    clips = [clip(0.37, 0), clip(1.0, 1)]
    made = AutoTokenizer.from_pretrained(package)
    got = PROCESSORS["granite_speech_plus"](package, made, made.chat_template)("w5 w6", clips)
    expected = hf_processor(
        text=[chat(AUDIO + "w5 w6")], audio=[torch.from_numpy(c) for c in clips],
        return_tensors="pt",
    )  # fmt: skip
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
    np.testing.assert_allclose(got["input_features"], expected["input_features"], atol=1e-5)
    mask = expected["input_features_mask"].numpy()
    np.testing.assert_array_equal(got["input_features_mask"], mask)


def test_generate_through_the_cli(built, hf_processor, tmp_path, capsys):
    """``mobius generate PKG PROMPT --audio A --audio B`` prints transformers' greedy text."""
    from _granite_speech_tiny import MAX_NEW_TOKENS
    from _qwen2_audio_tiny import write_wav

    from mobius.cli import main

    package, model, _ = built
    paths = [tmp_path / "a.wav", tmp_path / "b.wav"]
    read = [
        write_wav(p, clip(s, i)) for i, (p, s) in enumerate(zip(paths, (0.8, 0.45), strict=True))
    ]

    def transformers_text(text, clips):
        audio = [torch.from_numpy(c) for c in clips]
        inputs = hf_processor(text=[text], audio=audio, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        return hf_processor.tokenizer.decode(new, skip_special_tokens=True)

    args = ["generate", str(package), "w3 w4", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    expected = transformers_text(chat(AUDIO + "w3 w4"), read)
    capsys.readouterr()
    assert main([*args, "--audio", str(paths[0]), "--audio", str(paths[1])]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    # without the chat template: the placeholder goes in front of the prompt
    expected = transformers_text(AUDIO + "w3 w4", read[:1])
    assert main([*args, "--audio", str(paths[0]), "--no-chat-template"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
