"""Decoders built as text encoders (the ``text-encoder`` task) against transformers' bare models.

Each case saves a tiny random transformers model (every parameter perturbed) as a
diffusers pipeline's ``text_encoder`` folder holds it (the bare class: ``architectures:
["Gemma2Model"]``, ``embed_tokens.*``, ``layers.*``), or as a causal LM built with
``--model-type``, builds it through ``mobius build --hidden-states``, and compares
``last_hidden_state`` and every ``hidden_states.{i}`` with the bare model's
``output_hidden_states=True`` on a batch of two prompts of 7 and 4 tokens, padded on
the right (as Sana's and Lumina 2's tokenizers pad) and on the left (CogView4), at the
real tokens (max abs diff <= 1e-4). Padded positions are not compared: their states
are the pad token's, which every pipeline masks out or drops.
"""

from __future__ import annotations

import pytest
from text_encoder_parity_cases import all_cases, save_random_model
from transformers import AutoConfig

from mobius.cli import main
from mobius.testing import PARITY_ATOL, assert_smoke_passes, build_with_cli, perturb_parameters

CASES = all_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_encoder_parity(case, tmp_path, monkeypatch):
    """Right padding (Sana's and Lumina 2's tokenizers) and left padding (CogView4's); the
    case's ``sides`` where its transformers class reads one only (CPM-Ant's: left)."""
    import onnxruntime as ort

    from mobius_text.testing._text_encoder import compare_text_encoder

    model_type, overrides, spec = CASES[case]
    whole = spec.get("whole", False)
    model = save_random_model(model_type, overrides, spec["saved"], tmp_path / "hf", whole=whole)
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", *spec["options"])
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = {"last_hidden_state", *(f"hidden_states.{i}" for i in spec["states"])}
    for side in spec.get("sides", ("right", "left")):
        diffs = compare_text_encoder(model, session, [7, 4], seed=1, side=side)
        assert set(diffs) == expected
        assert max(diffs.values()) <= PARITY_ATOL, (side, diffs)
    if case == "mistral3_text":  # torch-free --validate: a VLM keeps vocab_size in text_config
        assert_smoke_passes(out, tmp_path / "hf", monkeypatch, tmp_path / "copy")


def test_a_bare_model_folder_builds_as_a_text_encoder(tmp_path):
    """config.json's architectures picks the registration: no --model-type needed."""
    from mobius import registry
    from mobius.source import lookup

    save_random_model("gemma2", {}, "Gemma2Model", tmp_path)
    entry = lookup(registry, tmp_path)
    assert (entry.key, entry.task) == ("Gemma2Model", "text-encoder")


@pytest.fixture(scope="module")
def bare_llama(tmp_path_factory):
    """A saved tiny ``LlamaModel`` folder (2 layers)."""
    path = tmp_path_factory.mktemp("bare-llama")
    save_random_model("llama", {}, "LlamaModel", path)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--hidden-states", "x"], "--hidden-states 'x': expected layer indices"),
        (
            ["--hidden-states", "3"],
            "--hidden-states 3: a model of 2 layers has hidden states 0 to 2",
        ),
        (["--hidden-states", "-4"], "(or -3 to -1, counted from the end)"),
        (["--head", "masked-lm"], "--head masked-lm: a decoder built as LlamaModel takes --head"),
    ],
)
def test_bad_options_are_one_line_errors(bare_llama, tmp_path, capsys, extra, message):
    code = main(["build", "--model", str(bare_llama), str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and "\n" not in err, err


def test_hidden_states_is_refused_for_a_causal_lm_build(tmp_path, capsys):
    save_random_model("llama", {}, "LlamaForCausalLM", tmp_path / "hf")
    capsys.readouterr()  # transformers' saving progress
    code = main(
        ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out"), "--hidden-states", "-2"]
    )
    err = capsys.readouterr().err.strip()
    assert (
        code != 0 and "--hidden-states applies to text-encoder and image-text-encoder models" in err
    ), err


def test_validate_compares_every_output_with_transformers(bare_llama, tmp_path, capsys):
    """``--validate`` runs the text-encoder validator: each output against the bare model."""
    out = str(tmp_path / "out")
    code = main(["build", "--model", str(bare_llama), out, "--hidden-states", "-2", "--validate"])
    report = capsys.readouterr().out
    assert code == 0, report
    assert "against transformers LlamaModel" in report and "hidden_states.1" in report, report


def test_hidden_state_selections():
    """The keyword form (a pipeline build's) takes ints and lists; negatives resolve from the end."""
    from mobius.errors import ConfigError
    from mobius_text.text_encoder import parse_hidden_states

    assert parse_hidden_states(None, 4) == ()
    assert parse_hidden_states("all", 2) == (0, 1, 2)
    assert parse_hidden_states("-2,0,3", 4) == (0, 3)
    assert parse_hidden_states([-3, -1], 4) == (2, 4)
    assert parse_hidden_states(-2, 4) == (3,)
    for bad in ("", "1,,2", True, [1.0], {"a": 1}):
        with pytest.raises(ConfigError, match="--hidden-states"):
            parse_hidden_states(bad, 4)


def test_a_bare_t5gemma_encoder_builds_as_t5gemma_encoder_model(tmp_path):
    """PRX's text encoder: transformers' bare ``T5GemmaEncoder`` (its stack's own config,
    names without ``encoder.``), built with --model-type, at the real tokens."""
    import onnxruntime as ort
    import torch
    from encoder_parity_cases.t5gemma_encoder import T5GEMMA_ENCODER
    from transformers.models.t5gemma.modeling_t5gemma import T5GemmaEncoder

    from mobius_text.testing._text_encoder import compare_text_encoder

    torch.manual_seed(0)
    # The stack's config as the composite one sets it (dropout_rate...), as T5GemmaEncoder saves it.
    hf_config = AutoConfig.for_model("t5gemma", **T5GEMMA_ENCODER, pad_token_id=0).encoder
    model = T5GemmaEncoder._from_config(hf_config, dtype=torch.float32, attn_implementation="eager")
    perturb_parameters(model, 0)
    model.eval().save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--model-type", "T5GemmaEncoderModel")
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    diffs = compare_text_encoder(model, session, [7, 4], seed=1)
    assert max(diffs.values()) <= PARITY_ATOL, diffs


def test_checkpoint_layouts_map_to_the_graph_names():
    """A pipeline's bare names, a causal LM's and both Qwen2.5-VL layouts reach ``model.*``."""
    from mobius_text.models.text_encoders import (
        DecoderTextEncoder,
        LlamaTextEncoderConfig,
        Qwen2_5_VLTextEncoder,
        QwenTextEncoderConfig,
    )

    fields = dict(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1)
    fields.update(
        num_attention_heads=2, num_key_value_heads=1, head_dim=4, layer_types=["full_attention"]
    )
    llama = DecoderTextEncoder(LlamaTextEncoderConfig(model_type="llama", **fields))
    assert set(llama.sanitize({"layers.0.a": 1, "model.norm.weight": 2, "lm_head.weight": 3})) == {
        "model.layers.0.a",
        "model.norm.weight",
        "lm_head.weight",  # ignored by name: DecoderTextEncoder.ignored
    }
    vl = Qwen2_5_VLTextEncoder(QwenTextEncoderConfig(model_type="qwen2_5_vl_text", **fields))
    names = ["model.language_model.layers.0.a", "model.visual.blocks.0.b", "model.norm.weight"]
    assert set(vl.sanitize(dict.fromkeys([*names, "visual.merger.c"]))) == {
        "model.layers.0.a",
        "visual.blocks.0.b",
        "model.norm.weight",
        "visual.merger.c",
    }
    assert {"lm_head.weight", "visual.*"} <= set(vl.ignored)


def test_mistral3_layouts_map_to_the_graph_names_and_ministral3_is_refused():
    """Mistral 3 saved (``language_model.model.``) and in memory (``model.language_model.``)
    reach ``model.*``; the vision tower, projector and head are ignored by name. A Ministral 3
    language model (position-scaled queries) is refused, not built as a Mistral."""
    from transformers import AutoConfig

    from mobius.errors import ConfigError
    from mobius_text.models.text_encoders import Mistral3TextEncoder, Mistral3TextEncoderConfig

    fields = dict(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1)
    fields.update(num_attention_heads=2, num_key_value_heads=1, head_dim=4)
    hf_config = AutoConfig.for_model("mistral3", text_config=dict(fields, model_type="mistral"))
    config = Mistral3TextEncoderConfig.from_hf(hf_config)
    assert (config.model_type, config.num_hidden_layers) == ("mistral", 1)
    encoder = Mistral3TextEncoder(config)
    saved = ["language_model.model.layers.0.a", "language_model.lm_head.weight"]
    in_memory = ["model.language_model.norm.weight", "lm_head.weight"]
    parts = ["vision_tower.x", "model.vision_tower.y", "model.multi_modal_projector.z"]
    assert set(encoder.sanitize(dict.fromkeys([*saved, *in_memory, *parts]))) == {
        "model.layers.0.a",
        "model.norm.weight",
        "lm_head.weight",
        "vision_tower.x",
        "vision_tower.y",
        "multi_modal_projector.z",
    }
    assert {"lm_head.weight", "vision_tower.*", "multi_modal_projector.*"} <= set(encoder.ignored)
    ministral = AutoConfig.for_model("mistral3", text_config=dict(fields, model_type="ministral3"))
    with pytest.raises(ConfigError, match="this text_config is a 'ministral3'"):
        Mistral3TextEncoderConfig.from_hf(ministral)
