"""Granite Speech with its LoRA adapter (``has_lora_adapter``): merged at build time.

One tiny random Granite Speech (every parameter perturbed) with a random PEFT LoRA adapter
for its text decoder saved beside it as the hub keeps one
(:func:`_granite_speech_tiny.save_adapted_model`: ranks and alphas that differ by module),
built once through the CLI:

- the package's features, prefill logits and cached greedy steps are within
  ``PARITY_ATOL`` of transformers with the adapter on (as its ``generate`` runs audio),
  and the adapter changes the logits far beyond that (so the test can fail);
- ``mobius generate PKG PROMPT --audio A`` prints transformers' greedy text; a text-only
  prompt (which transformers answers with the adapter off) is refused in one line;
- the package says the adapter was merged (``merged_adapter.json``); ``--part text`` (the
  decoder for text-only prompts) is the base decoder, as transformers runs text alone;
- ``mobius build --validate``'s check passes it against transformers loading the adapter
  from the source itself (and refuses in one line where transformers could not);
- the adapter's other layouts (transformers 5's module tree, the decoder alone) merge the
  same weights; a directory without the adapter's files is refused in one line naming them.

Needs peft (a test dependency): transformers' ``add_adapter`` wants peft >= 0.22 (not on
PyPI's index here), so the reference injects the adapter with peft's
``inject_adapter_in_model``.
"""

from __future__ import annotations

import contextlib
import json
import shutil

import numpy as np
import pytest
from _cli import one_line_error
from _granite_speech_tiny import (
    MAX_NEW_TOKENS,
    clip,
    save_adapted_model,
    tokenizer,
    transformers_processor,
    write_wav,
)

from mobius.cli import main
from mobius.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MERGE_RECORD, LoraAdapter, merge_lora
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius.weights import SafetensorsCheckpoint
from mobius_audio.models.granite_speech import GraniteSpeechForConditionalGeneration
from mobius_audio.testing._audio_language_parity import compare_audio_language

torch = pytest.importorskip("torch")
pytest.importorskip("peft", reason="peft makes the reference adapter (a test dependency)")
AUDIO = "<|audio|>"


@pytest.fixture(scope="module")
def hf_processor():
    """transformers' ``GraniteSpeechProcessor`` (its extractor's torchaudio stood in for)."""
    with pytest.MonkeyPatch.context() as patch:
        yield transformers_processor(patch)


@pytest.fixture(scope="module")
def built(tmp_path_factory, hf_processor):
    """``(source dir, package dir, transformers' model with the adapter on)``."""
    root = tmp_path_factory.mktemp("granite_speech_lora")
    model = save_adapted_model(root / "src", hf_processor.audio_processor)
    return root / "src", build_with_cli(root / "src", root / "out"), model


def chat(prompt: str) -> str:
    messages = [{"role": "user", "content": AUDIO + prompt}]
    return tokenizer().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def hf_inputs(hf_processor, texts, clips):
    """transformers' processor on ``texts`` and the float32 ``clips``, batched (left padded)."""
    return hf_processor(
        text=texts, audio=[torch.from_numpy(c) for c in clips], return_tensors="pt", padding=True
    )


@contextlib.contextmanager
def adapter_off(model):
    """transformers' model with its LoRA layers off (as its ``generate`` runs text alone)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    assert layers
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def greedy(model, inputs) -> list[int]:
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def test_parity_with_the_adapter_on(built, hf_processor):
    _, package, model = built
    clips = [clip(0.45, 0), clip(1.0, 1)]
    inputs = hf_inputs(hf_processor, [chat("w5"), chat("w9 w10 w11")], clips)
    ids = inputs["input_ids"].numpy().astype(np.int64)
    mask = inputs["attention_mask"].numpy().astype(np.int64)
    selected = inputs["input_features_mask"].numpy()
    audio = {"input_features": inputs["input_features"].numpy(), "input_features_mask": selected}
    with torch.no_grad():
        reference = model.get_audio_features(inputs["input_features"]).pooler_output.numpy()
    parity = compare_audio_language(model, package, ids, mask, audio, reference[selected], steps=2)
    parity.assert_close()

    with torch.no_grad(), adapter_off(model):
        base = model(**inputs).logits
    with torch.no_grad():
        adapted = model(**inputs).logits
    assert (adapted - base).abs().max() > 1e-2  # far beyond PARITY_ATOL: the test can fail

    record = json.loads((package / MERGE_RECORD).read_text())
    assert record["merged"] is True and record["merged_modules"] == 6, record


def test_generate_through_the_cli(built, hf_processor, tmp_path, capsys):
    _, package, model = built
    wav = tmp_path / "a.wav"
    read = write_wav(wav, clip(0.8, 3))
    inputs = hf_inputs(hf_processor, [chat("w3 w4")], [read])
    new = greedy(model, inputs)
    expected = hf_processor.tokenizer.decode(new, skip_special_tokens=True)
    assert len(set(expected.split())) > 2, expected  # tokens that tell models apart
    with adapter_off(model):
        assert greedy(model, inputs) != new  # the base decoder's answer is another
    args = ["generate", str(package), "w3 w4", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    capsys.readouterr()
    assert main([*args, "--audio", str(wav)]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    err = one_line_error(capsys, *args)
    assert "LoRA adapter merged" in err and "--audio" in err


def adapter_renamed(source, destination, renames: dict[str, str]):
    """A copy of ``source``'s adapter whose peft module names went through ``renames``."""
    from safetensors.numpy import load_file, save_file

    destination.mkdir()
    shutil.copy(source / ADAPTER_CONFIG, destination)
    tensors = load_file(source / ADAPTER_WEIGHTS)
    prefix = "base_model.model."
    moved = {}
    for name, tensor in tensors.items():
        module = name[len(prefix) :]
        old = next(p for p in renames if module.startswith(p))
        moved[prefix + renames[old] + module[len(old) :]] = tensor
    save_file(moved, destination / ADAPTER_WEIGHTS)
    return LoraAdapter.read(destination)


@pytest.mark.parametrize(
    "layout",
    [
        {"language_model.model.": "model.language_model."},  # transformers 5's module tree
        {"language_model.model.": "model."},  # the text decoder alone
    ],
)
def test_other_adapter_layouts_merge_the_same_weights(built, tmp_path, layout):
    source = built[0]
    checkpoint = SafetensorsCheckpoint.open(source)
    options = dict(
        renames=GraniteSpeechForConditionalGeneration.renames,
        adapter_renames={"model.layers.": "language_model.model.layers."},
    )
    hub = merge_lora(checkpoint, LoraAdapter.read(source), **options)
    other = merge_lora(checkpoint, adapter_renamed(source, tmp_path / "a", layout), **options)
    changed = [name for name in hub if hub[name] is not checkpoint[name]]
    assert len(changed) == 6 and all(other[name] is not checkpoint[name] for name in changed)
    for name in changed:
        np.testing.assert_array_equal(hub[name].numpy(), other[name].numpy())


@pytest.mark.parametrize("missing", [ADAPTER_CONFIG, ADAPTER_WEIGHTS])
def test_missing_adapter_files_are_one_line(built, tmp_path, capsys, missing):
    copy = shutil.copytree(built[0], tmp_path / "src")
    (copy / missing).unlink()
    err = one_line_error(capsys, "build", "--model", copy, tmp_path / "out")
    assert "has_lora_adapter" in err and f"has no {missing}" in err, err


def test_validate_against_transformers_loading_the_adapter(built, tmp_path, monkeypatch):
    """``mobius build --validate``'s check passes the package against transformers, which
    loads the adapter from the source itself (peft's hub names, its own mapping); where it
    cannot (no peft), the check says so in one line instead of reporting a mismatch."""
    from mobius.errors import MobiusError
    from mobius.validate import validate_package
    from mobius_audio import validate_audio_language

    source, package, _ = built
    copy = shutil.copytree(package, tmp_path / "copy")
    report = validate_package(copy, source)
    assert report.passed and report.tokens_agree, report

    load = validate_audio_language.load_reference

    def without_adapter(*args, **keywords):
        model = load(*args, **keywords)
        model._hf_peft_config_loaded = False  # as transformers leaves it without peft
        return model

    monkeypatch.setattr(validate_audio_language, "load_reference", without_adapter)
    with pytest.raises(MobiusError) as excinfo:
        validate_package(copy, source)
    message = str(excinfo.value)
    assert "\n" not in message and "needs peft" in message, message


def test_text_part_is_the_base_decoder(built, tmp_path):
    """``--part text`` builds the decoder for text-only prompts: the adapter is not merged,
    and its logits are transformers' with the adapter off."""
    pytest.importorskip("mobius_vision", reason="--part text is mobius-vision's option")
    from mobius.testing import OnnxCausalLM

    source, _, model = built
    package = build_with_cli(source, tmp_path / "text", "--part", "text")
    assert not (package / MERGE_RECORD).exists()
    ids = np.asarray([[5, 9, 17, 3, 40]], np.int64)
    onnx = OnnxCausalLM(package / "model.onnx")
    mask, positions = np.ones_like(ids), np.arange(ids.shape[1])[None]
    logits, _ = onnx(ids, mask, positions, onnx.empty_cache(1))
    with torch.no_grad(), adapter_off(model):
        expected = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    with torch.no_grad():
        adapted = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    # --part text builds Granite's own causal LM, whose head divides by logits_scaling; the
    # speech wrapper's lm_head does not (greedy tokens agree; the scale is the text part's)
    logits = logits * model.config.text_config.logits_scaling
    np.testing.assert_allclose(logits, expected, rtol=0, atol=PARITY_ATOL)
    assert np.abs(adapted - expected).max() > 1e-2  # the adapter would have changed them
