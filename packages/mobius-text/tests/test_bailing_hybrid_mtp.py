"""Bailing hybrid checkpoints store ``num_mtp_layers`` multi-token-prediction layers after the
decoder; generation does not read them and transformers skips them by index, so a build
ignores ``model.layers.{num_hidden_layers}.*``, and only those."""

from __future__ import annotations

import shutil

import pytest
from safetensors.numpy import load_file, save_file

from mobius.cli import main
from mobius.testing import make_random_model

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=16,
    layer_types=["linear_attention", "full_attention"],
    mlp_layer_types=["dense", "dense"],
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=16,
    num_nextn_predict_layers=1,
    eos_token_id=1,
    pad_token_id=0,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import AutoConfig

    directory = tmp_path_factory.mktemp("bailing_hybrid") / "hf"
    config = AutoConfig.for_model("bailing_hybrid", **TINY)
    make_random_model(config).save_pretrained(directory)
    return directory


@pytest.mark.parametrize(("layer", "builds"), [(2, True), (3, False)])
def test_only_the_mtp_layers_are_ignored(checkpoint, tmp_path, capsys, layer, builds):
    source = tmp_path / "hf"
    shutil.copytree(checkpoint, source)
    weights = load_file(source / "model.safetensors")
    weights[f"model.layers.{layer}.eh_proj.weight"] = weights["model.norm.weight"].copy()
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    code = main(["build", "--model", str(source), str(tmp_path / "out"), "--quiet"])
    assert (code == 0) == builds
    if not builds:
        assert f"model.layers.{layer}.eh_proj.weight" in capsys.readouterr().err
