"""GLM-4.5 checkpoints carry a multi-token-prediction layer after the last decoder layer.

Generation does not read it and transformers skips it by index, so a build ignores
``model.layers.{num_hidden_layers}.*`` on purpose, while a tensor one layer further is
still an unexpected tensor that fails the build.
"""

from __future__ import annotations

import pytest
from safetensors.numpy import load_file, save_file

from mobius.cli import main
from mobius.testing import make_random_model

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    n_routed_experts=4,
    n_shared_experts=1,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
    n_group=1,
    topk_group=1,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import AutoConfig

    directory = tmp_path_factory.mktemp("glm4_moe") / "hf"
    make_random_model(AutoConfig.for_model("glm4_moe", **TINY)).save_pretrained(directory)
    return directory


def with_extra_layer(checkpoint, directory, layer: int):
    """A copy of ``checkpoint`` whose weights add one tensor of decoder layer ``layer``."""
    import shutil

    shutil.copytree(checkpoint, directory)
    weights = load_file(directory / "model.safetensors")
    weights[f"model.layers.{layer}.eh_proj.weight"] = weights["model.norm.weight"].copy()
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


def test_the_mtp_layer_is_ignored(checkpoint, tmp_path):
    source = with_extra_layer(checkpoint, tmp_path / "hf", TINY["num_hidden_layers"])
    assert main(["build", "--model", str(source), str(tmp_path / "out"), "--quiet"]) == 0


def test_a_tensor_past_the_mtp_layer_is_still_refused(checkpoint, tmp_path, capsys):
    source = with_extra_layer(checkpoint, tmp_path / "hf", TINY["num_hidden_layers"] + 1)
    assert main(["build", "--model", str(source), str(tmp_path / "out"), "--quiet"]) != 0
    assert "model.layers.3.eh_proj.weight" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
