"""``--opset``: a package at a later ONNX opset computes what the default one does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import mobius
from mobius.cli import main
from mobius.options import OPSETS
from mobius.testing import OnnxCausalLM, left_padded_batch
from mobius_text.testing import write_tiny_llama


def _logits(package) -> np.ndarray:
    model = OnnxCausalLM(package / "model.onnx")
    ids, mask, positions = left_padded_batch([5, 3], 64)
    logits, _ = model(ids, mask, positions, model.empty_cache(2))
    return logits


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_a_later_opset_gives_the_same_logits(tmp_path, ep):
    source = write_tiny_llama(tmp_path / "hf")
    packages = {}
    for opset in (OPSETS[0], OPSETS[-1]):
        out = tmp_path / f"{ep}-{opset}"
        assert (
            main(
                ["build", "--model", str(source), str(out), "-q", "--ep", ep, "--opset", str(opset)]
            )
            == 0
        )
        graph = onnx.load(str(out / "model.onnx"), load_external_data=False)
        assert {i.domain: i.version for i in graph.opset_import}[""] == opset
        packages[opset] = _logits(out)
    np.testing.assert_array_equal(packages[OPSETS[-1]], packages[OPSETS[0]])


def test_an_opset_before_the_graphs_ops_is_refused(tmp_path, capsys):
    with pytest.raises(mobius.MobiusError, match="opset 21 is not one mobius writes"):
        mobius.build(tmp_path, opset=21)
    with pytest.raises(SystemExit):
        main(["build", "--model", str(tmp_path), str(tmp_path / "o"), "--opset", "21"])
    assert "invalid choice: 21" in capsys.readouterr().err
