"""onnxruntime-genai runs a split vision–language package mobius writes, with its genai_config.json.

A tiny random Mistral 3 and a Qwen2.5-VL are built with ``--ep cpu`` (``--runtime auto`` writes the
generator config for the families the generator has a class for); the generator's
greedy tokens for a text prompt equal transformers' ``generate``. Images through the
generator also need its image processor config, which mobius does not write.
"""

from __future__ import annotations

import json
import sys

import pytest
from vl_parity_cases.mistral3 import CASES

from mobius.testing import build_with_cli, genai_greedy, torch_greedy
from mobius.testing._vl_parity import make_random_vl_model

if sys.version_info < (3, 11):
    # Not a dev dependency there: onnxruntime-genai 0.18 needs onnxruntime >= 1.31,
    # which ships no Python 3.10 wheels.
    pytest.skip("onnxruntime-genai needs Python >= 3.11", allow_module_level=True)

import onnxruntime_genai as og  # noqa: E402


def test_genai_runs_a_mistral3_package(tmp_path):
    _, make_config, _processor, *_ = CASES["mistral3-mistral"]
    torch_model = make_random_vl_model(make_config())
    torch_model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--ep", "cpu")
    config = json.loads((out / "genai_config.json").read_text())["model"]
    assert config["type"] == "mistral3"
    assert config["decoder"]["filename"] == "decoder/model.onnx"
    assert config["decoder"]["inputs"]["inputs_embeds"] == "inputs_embeds"
    assert config["vision"]["inputs"] == {
        "pixel_values": "pixel_values",
        "image_sizes": "image_sizes",
    }
    prompt = [1, 6, 7, 9, 10, 12, 8]
    expected = torch_greedy(torch_model, prompt, 12, eos="suppress")
    assert genai_greedy(og.Model(str(out)), prompt, 12) == expected


def test_genai_runs_a_qwen2_5_vl_package(tmp_path):
    """Qwen2.5-VL's decoder takes M-RoPE's [3, batch, sequence] positions; the generator makes them."""
    from vl_parity_cases.qwen2_5_vl import CASES as QWEN

    _, make_config, _processor, *_ = QWEN["qwen2_5_vl-all-windows-gelu-tied"]
    config = make_config()
    for part in (config, config.text_config):  # the defaults are the real vocabulary's ids
        part.bos_token_id, part.eos_token_id, part.pad_token_id = 1, 2, 0
    torch_model = make_random_vl_model(config)
    torch_model.save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--ep", "cpu")
    genai = json.loads((out / "genai_config.json").read_text())["model"]
    assert genai["type"] == "qwen2_5_vl"
    assert genai["vision"]["inputs"] == {
        "pixel_values": "pixel_values",
        "image_grid_thw": "image_grid_thw",
    }
    assert (genai["vision"]["patch_size"], genai["vision"]["spatial_merge_size"]) == (4, 2)
    prompt = [1, 6, 7, 9, 10, 12, 8]
    expected = torch_greedy(torch_model, prompt, 12, eos="suppress")
    assert genai_greedy(og.Model(str(out)), prompt, 12) == expected


def test_no_genai_config_for_families_the_generator_lacks(tmp_path, capsys):
    from vl_parity_cases.llava import CASES as LLAVA

    _, make_config, _processor = LLAVA["llava-llama"]
    make_random_vl_model(make_config()).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx")
    assert not (out / "genai_config.json").exists()
    assert "no vision–language class for 'llava'" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["split", "single"])
def test_generate_refuses_a_vision_language_package(tmp_path, form):
    from vl_parity_cases.llava import CASES as LLAVA

    from mobius.errors import MobiusError
    from mobius.generate import open_generator

    _, make_config, _processor = LLAVA["llava-llama"]
    make_random_vl_model(make_config()).save_pretrained(tmp_path / "hf")
    out = build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--form", form)
    with pytest.raises(MobiusError, match="is a vision–language package"):
        open_generator(out)
