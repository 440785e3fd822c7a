"""BLIP-2 and InstructBLIP beyond the shared generate tests (``test_vl_generate.py``, which
compares their processors and ``mobius generate`` with transformers): the single-graph
form with the Q-Former's instruction inputs, the inputs they refuse, the Q-Former's
tokenizer kept by the build, the T5 flavour refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_vl_generate import Built, cli_text, image_files, pixels, random_image  # noqa: F401 (fixture)
from transformers import AutoConfig

from mobius.errors import ConfigError, MobiusError
from mobius.testing import build_with_cli
from mobius_vision.models.blip_2 import Blip2Config
from mobius_vision.processing import processor_for
from mobius_vision.processing._settings import keep_sub_tokenizers


@pytest.fixture(scope="module")
def instructblip(tmp_path_factory):
    return Built("instructblip", tmp_path_factory.mktemp("instructblip"))


def test_single_graph_takes_the_instruction_beside_the_pixels(
    instructblip,
    image_files,  # noqa: F811 (the shared fixture, imported)
    capsys,
):
    single = build_with_cli(instructblip.hf, instructblip.hf.parent / "single", "--form", "single")
    capsys.readouterr()  # the build's own lines
    prompt = instructblip.prompt
    expected = instructblip.greedy_text(prompt, [pixels(image_files[0])])
    assert cli_text(single, prompt, image_files[:1], capsys) == expected


def test_two_images_and_a_placeholder_are_refused(instructblip):
    processor = processor_for(instructblip.package, "instructblip")
    image = random_image((16, 16))
    with pytest.raises(MobiusError, match="takes one image per prompt"):
        processor("w5 w7", [image, image])
    with pytest.raises(MobiusError, match="leave <image> out of it"):
        processor("<image> w5 w7", [image])


def test_text_only_prompt_has_no_qformer_inputs(instructblip):
    inputs = processor_for(instructblip.package, "instructblip")("w5 w7", [])
    assert sorted(inputs) == ["attention_mask", "input_ids"]


def test_package_without_the_qformer_tokenizer_is_named(instructblip, tmp_path):
    import shutil

    package = tmp_path / "package"
    shutil.copytree(instructblip.package, package)
    shutil.rmtree(package / "qformer_tokenizer")
    with pytest.raises(MobiusError, match="has no qformer_tokenizer/"):
        processor_for(package, "instructblip")


def test_build_keeps_only_the_sub_tokenizers_text_files(tmp_path):
    folder = tmp_path / "qformer_tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    (folder / "weights.bin").write_bytes(b"\0")
    source = SimpleNamespace(source_dir=tmp_path, text_files={})
    keep_sub_tokenizers(tmp_path, source.text_files)
    assert source.text_files == {"qformer_tokenizer/tokenizer.json": "{}"}


def test_blip_2_over_t5_is_refused():
    t5 = dict(model_type="t5", d_model=16, num_layers=1, num_heads=2, vocab_size=32)
    config = AutoConfig.for_model("blip-2", text_config=t5, image_token_index=3)
    with pytest.raises(ConfigError, match="encoder-decoder language model"):
        Blip2Config.from_hf(config)
