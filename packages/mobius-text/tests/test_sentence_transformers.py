"""The sentence-transformers source: ``modules.json`` sets the embedding head, pooling and norm.

Weightless builds of a tiny BERT directory (config.json only): the head, pooling
and normalisation come from ``modules.json`` under ``--head auto``, explicit
options win, and modules mobius does not build are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mobius
from mobius.errors import ConfigError, UnsafePathError

BERT = {
    "model_type": "bert",
    "architectures": ["BertModel"],
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}


def write_sentence_transformer(directory: Path, modules=None, pooling=None) -> Path:
    """A tiny BERT with ``modules.json`` (Transformer, Pooling, Normalize by default)."""
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(BERT))
    if modules is None:
        modules = ["Transformer", "Pooling", "Normalize"]
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize"}
    entries = [
        {
            "idx": i,
            "name": str(i),
            "path": paths.get(kind, kind),
            "type": f"sentence_transformers.models.{kind}",
        }
        for i, kind in enumerate(modules)
    ]
    (directory / "modules.json").write_text(json.dumps(entries))
    if "Pooling" in modules:
        (directory / "1_Pooling").mkdir()
        config = {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}
        config = config if pooling is None else pooling
        (directory / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return directory


def heads(package) -> tuple[str, str, bool]:
    config = package.config
    return config.head, config.pooling, config.normalize


def test_modules_json_gives_the_sentence_embedding(tmp_path):
    model = write_sentence_transformer(tmp_path / "st")
    package = mobius.build(model, load_weights=False)
    assert heads(package) == ("sentence-embedding", "mean", True)
    outputs = [v.name for v in package.models["model"].graph.outputs]
    assert outputs == ["last_hidden_state", "sentence_embedding"]


def test_cls_pooling_without_normalize(tmp_path):
    pooling = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    model = write_sentence_transformer(
        tmp_path / "st", modules=["Transformer", "Pooling"], pooling=pooling
    )
    assert heads(mobius.build(model, load_weights=False)) == ("sentence-embedding", "cls", False)


def test_explicit_options_win(tmp_path):
    model = write_sentence_transformer(tmp_path / "st")
    package = mobius.build(model, load_weights=False, pooling="max", normalize=False)
    assert heads(package) == ("sentence-embedding", "max", False)
    # An explicit head does not read modules.json at all: the defaults are core's.
    package = mobius.build(model, load_weights=False, head="sentence-embedding")
    assert heads(package) == ("sentence-embedding", "mean", False)
    assert heads(mobius.build(model, load_weights=False, head="none"))[0] == "none"


def test_unsupported_modules_are_refused(tmp_path):
    model = write_sentence_transformer(tmp_path / "st", modules=["Transformer", "Pooling", "Dense"])
    with pytest.raises(
        ConfigError, match="sentence-transformers modules Dense in .* are not built"
    ):
        mobius.build(model, load_weights=False)
    # The message's way out works: the encoder alone.
    assert heads(mobius.build(model, load_weights=False, head="none"))[0] == "none"


@pytest.mark.parametrize(
    "pooling",
    [{"pooling_mode_mean_sqrt_len_tokens": True}, {}],
    ids=["mean_sqrt_len", "none"],
)
def test_unsupported_pooling_is_refused(tmp_path, pooling):
    model = write_sentence_transformer(tmp_path / "st", pooling=pooling)
    with pytest.raises(ConfigError, match="sentence-transformers pooling .* mobius pools with one"):
        mobius.build(model, load_weights=False)


def test_unreadable_modules_json_is_refused(tmp_path):
    model = write_sentence_transformer(tmp_path / "st")
    (model / "modules.json").write_text("[{")
    with pytest.raises(ConfigError, match="unreadable modules.json"):
        mobius.build(model, load_weights=False)


def test_modules_json_of_a_decoder_is_read_unless_a_head_is_given(tmp_path):
    from mobius_text.testing import write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama")
    (model / "modules.json").write_text("not json")  # a decoder embedder's: read
    with pytest.raises(ConfigError, match="unreadable modules.json"):
        mobius.build(model, load_weights=False, runtime="onnx")
    package = mobius.build(model, load_weights=False, runtime="onnx", head="none")
    assert package.task == "causal-lm"


def test_modules_json_of_a_decoder_gives_its_bare_models_embedding(tmp_path):
    """Qwen3-Embedding's layout: a *ForCausalLM config, last-token pooling, normalised."""
    from mobius_text.testing import write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama")
    write_sentence_transformer(tmp_path / "st", pooling={"pooling_mode": "lasttoken"})
    for name in ("modules.json", "1_Pooling"):
        (tmp_path / "st" / name).rename(model / name)
    package = mobius.build(model, load_weights=False)
    assert package.task == "text-encoder" and heads(package) == (
        "sentence-embedding",
        "lasttoken",
        True,
    )
    outputs = [v.name for v in package.models["model"].graph.outputs]
    assert outputs == ["last_hidden_state", "sentence_embedding"]


def test_a_decoder_reranker_needs_two_token_ids(tmp_path):
    from mobius_text.testing import write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama")
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "",
            "type": "sentence_transformers.base.modules.Transformer",
        },
        {
            "idx": 1,
            "name": "1",
            "path": "1_LogitScore",
            "type": "sentence_transformers.cross_encoder.modules.LogitScore",
        },
    ]
    (model / "modules.json").write_text(json.dumps(modules))
    (model / "1_LogitScore").mkdir()
    (model / "1_LogitScore" / "config.json").write_text(json.dumps({"true_token_id": 5}))
    with pytest.raises(ConfigError, match="LogitScore in .*: mobius builds a true and a false"):
        mobius.build(model, load_weights=False)
    (model / "1_LogitScore" / "config.json").write_text(
        json.dumps({"true_token_id": 5, "false_token_id": 6})
    )
    package = mobius.build(model, load_weights=False)
    assert package.config.score_token_ids == (5, 6)
    outputs = [v.name for v in package.models["model"].graph.outputs]
    assert outputs == ["last_hidden_state", "logits"]


@pytest.mark.parametrize("escape", ["../outside", "/etc", 7])
def test_a_module_path_outside_the_directory_is_refused(tmp_path, escape):
    """modules.json is a stranger's file: its Pooling path may not leave the model directory."""
    from mobius_text.sentence_transformers import sentence_transformers_pooling

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    modules = [
        {"type": "sentence_transformers.models.Transformer", "path": ""},
        {"type": "sentence_transformers.models.Pooling", "path": escape},
    ]
    (model_dir / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UnsafePathError, match="modules.json"):
        sentence_transformers_pooling(model_dir)
