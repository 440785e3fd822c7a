"""``mobius generate PKG PROMPT --image FILE`` against transformers' processor and ``generate``.

Each family's tiny case (``vl_parity_cases``) makes a random VL model with every
parameter perturbed and the family's real processor (its PIL image processor: the
torchvision ones are not installed); both are saved as a checkpoint directory and
built once with the CLI (split form; LLaVA also single). Then:

- the package's torch-free processor (:mod:`mobius_vision.processing`) gives what the
  transformers processor gives: the same ids, pixels within 1e-6, the same sizes/types;
- ``mobius generate`` through :func:`mobius.cli.main` prints what transformers' greedy
  ``generate`` decodes for the same prompt and image;
- bad input (a missing image, a file that is no image, a text package given --image)
  is a one-line error; a transparent image is composited onto white as transformers
  does, and the build keeps the HF processor settings the runner reads.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from _vl_built import BuiltVL, random_image, save_processor  # noqa: F401 (imported from here too)
from vl_parity_cases import all_cases

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.processing import (
    HF_PROCESSOR_FILE,
    keep_processor_config,
    processor_class,
    processor_for,
)
from mobius_vision.processing._image import open_image, to_chw

CASES = all_cases()
PROMPT = "USER: <image>\nw5 w7 w9 ASSISTANT:"
# family -> (its tiny case, the prompt: with the placeholder the family's processor expects)
FAMILIES = {
    "llava": ("llava-llama", PROMPT),
    "vipllava": ("vipllava-llama-layers-last-0-1", PROMPT),
    "video_llava": ("video_llava-llama", PROMPT),
    "paligemma": ("paligemma-gemma", "w5 w7 w9 w11"),  # the processor puts the image first
    "gemma3": ("gemma3", "<start_of_image> w3 w8 w2"),
    "llava_next": ("llava_next-llama-wide-tall", PROMPT),
    "llava_onevision": ("llava_onevision-qwen2-siglip-wide-tall", PROMPT),
    "llava_next_video": ("llava_next_video-llama-wide-tall-images", PROMPT),
    "aya_vision": ("aya_vision", PROMPT),
    "cohere2_vision": ("cohere2_vision", PROMPT),
    "internvl": ("internvl-qwen2-tiles", PROMPT),
    "deepseek_vl": ("deepseek_vl-llama", PROMPT),
    "llama4": ("llama4-moe-chunked-nope", "USER: <|image|>\nw15 w17 w19 ASSISTANT:"),
    "blip-2": (
        "blip-2-opt-cross-every-other-layer",
        "Question: w5 w7 w9 Answer:",
    ),  # no placeholder
    "instructblip": ("instructblip-opt", "Question: w5 w7 w9 Answer:"),
}
# A wide, a tall, a square and a small image: different tile grids and crops.
SIZES = ((37, 45), (45, 20), (20, 45), (16, 16))
# Training targets PaliGemma's processor adds: not an input of generate.
NOT_INPUTS = ("labels",)


def hf_inputs(processor, case: str, prompt: str, images: list, tensors: str) -> dict:
    """The transformers processor's inputs for one prompt. The images go as one list for the
    prompt where the processor tells prompts apart that way (Gemma 3 wants it; LLaVA-OneVision
    leaves several images of one prompt untiled, as its chat template path passes them)."""
    model_type, *_, options = CASES[case] if len(CASES[case]) > 3 else (*CASES[case], {})
    nested = options.get("images_per_prompt") or model_type == "llava_onevision"
    batch = ([images] if nested else images) if images else None
    inputs = processor(text=[prompt], images=batch, return_tensors=tensors)
    return {k: v for k, v in inputs.items() if k not in NOT_INPUTS}


class Built(BuiltVL):
    """One family's case (:data:`FAMILIES`); LLaVA is built in the single-graph form too."""

    def __init__(self, family: str, root) -> None:
        self.case, self.prompt = FAMILIES[family]
        super().__init__(CASES[self.case], root, family)
        self.single = None
        if family == "llava":  # one family in the single-graph form too
            self.single = build_with_cli(self.hf, root / "single", "--form", "single")

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np") -> dict:
        inputs = hf_inputs(self.processor, self.case, prompt, images, tensors)
        if not images and "token_type_ids" in inputs:  # Gemma 3 reads them with images only
            del inputs["token_type_ids"]
        return inputs

    def greedy_tokens(self, prompt: str, images: list, max_new_tokens: int) -> list[int]:
        new = super().greedy_tokens(prompt, images, max_new_tokens)
        eos = self.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        if new and new[-1] in eos:  # the runner stops at it without printing it
            new = new[:-1]
        return new


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    return Built(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def image_files(tmp_path_factory) -> list:
    """A wide and a tall PNG."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("images")
    paths = [folder / "wide.png", folder / "tall.png"]
    for seed, (path, size) in enumerate(zip(paths, ((37, 45), (45, 20)), strict=True)):
        Image.fromarray(random_image(size, seed=seed + 1)).save(path)
    return paths


def pixels(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def cli_text(package, prompt: str, images, capsys, *options: str) -> str:
    """What ``mobius generate`` prints on stdout (8 new tokens at most); the stats on stderr."""
    args = [str(package), prompt, *(a for image in images for a in ("--image", str(image)))]
    assert main(["generate", *args, "--max-new-tokens", "8", *options]) == 0
    out, err = capsys.readouterr()
    assert "new tokens" in err and "time to first token" in err
    assert out.endswith("\n")
    return out[:-1]


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, CASES[built.case][0])
    for index, size in enumerate(SIZES):
        image = random_image(size, seed=index)
        expected = {
            k: np.asarray(v)
            for k, v in hf_inputs(built.processor, built.case, built.prompt, [image], "np").items()
        }
        got = mine(built.prompt, [image])
        assert sorted(got) == sorted(expected), size
        for name, value in expected.items():
            assert got[name].shape == value.shape, (name, size)
            if np.issubdtype(value.dtype, np.floating):
                assert got[name].dtype == np.float32, name
                np.testing.assert_allclose(got[name], value, atol=1e-6, rtol=0, err_msg=name)
            else:
                np.testing.assert_array_equal(got[name], value, err_msg=f"{name} at {size}")


def test_generate_with_image_matches_transformers(built, image_files, capsys):
    image = pixels(image_files[0])
    expected = built.greedy_text(built.prompt, [image])
    # The tiny model's text depends on the image, so a wrong pixel or token shows.
    assert expected != built.greedy_text(built.prompt, [random_image((37, 45), seed=7)])
    assert cli_text(built.package, built.prompt, image_files[:1], capsys) == expected
    if built.single is not None:
        assert cli_text(built.single, built.prompt, image_files[:1], capsys) == expected


@pytest.mark.parametrize("built", ["llava_next", "llava_onevision", "gemma3"], indirect=True)
def test_two_images_in_one_prompt(built, image_files, capsys):
    """Two images of different shapes: tile grids padded to one batch (LLaVA-NeXT), or left
    untiled as OneVision does for several images in a prompt."""
    token = "<start_of_image>" if built.family == "gemma3" else "<image>"
    prompt = f"USER: {token} w3 {token}\nw5 w7 ASSISTANT:"
    expected = built.greedy_text(prompt, [pixels(path) for path in image_files])
    assert cli_text(built.package, prompt, image_files, capsys) == expected


@pytest.mark.parametrize("built", ["llava", "gemma3"], indirect=True)
def test_text_only_prompt(built, capsys):
    prompt = "USER: w5 w7 w9 ASSISTANT:"
    assert cli_text(built.package, prompt, [], capsys) == built.greedy_text(prompt, [])
    if built.single is not None:
        assert cli_text(built.single, prompt, [], capsys) == built.greedy_text(prompt, [])


# A LLaVA-style chat template: the images of a user message as <image> lines, then its text.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() }}: "
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>\n"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %} {% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


@pytest.mark.parametrize("built", ["llava"], indirect=True)
def test_chat_template_puts_the_images_in_the_user_message(built, image_files, tmp_path, capsys):
    """The package's chat template (the processor's ``chat_template.jinja``) renders the
    prompt as transformers' ``apply_chat_template`` does: a user message of the images,
    then the text; ``--system`` adds a system message."""
    package = tmp_path / "chat"
    shutil.copytree(built.package, package)
    (package / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    built.processor.chat_template = CHAT_TEMPLATE
    images = [pixels(path) for path in image_files]
    for system in (None, "w11 w12"):
        content = [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "w5 w7"}]
        messages = [{"role": "user", "content": content}]
        options = []
        if system is not None:
            messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
            options = ["--system", system]
        text = built.processor.apply_chat_template(messages, add_generation_prompt=True)
        expected = built.greedy_text(text, images)
        assert cli_text(package, "w5 w7", image_files, capsys, *options) == expected


@pytest.mark.parametrize("built", ["llava"], indirect=True)
def test_prompt_without_placeholder_gets_one_per_image(built, image_files, capsys):
    """With no placeholder the runner puts one per image before the prompt, then a newline
    (the base processor's placement; PaliGemma's processor places the image itself)."""
    prompt = "USER: w5 w7 ASSISTANT:"
    expected = built.greedy_text("<image>\n" + prompt, [pixels(image_files[0])])
    assert cli_text(built.package, prompt, image_files[:1], capsys) == expected


def test_missing_and_unreadable_images_are_refused(built, tmp_path, capsys):
    def error(*args: str) -> str:
        assert main(["generate", *args]) != 0
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    package = str(built.package)
    missing = tmp_path / "no.png"
    assert f"no image file at {missing}" in error(package, "hi", "--image", str(missing))
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    assert f"cannot read {text} as an image" in error(package, "hi", "--image", str(text))


def test_image_for_a_package_that_is_not_vision_language_is_refused(tmp_path, capsys):
    assert main(["generate", str(tmp_path), "hi", "--image", "cat.png"]) != 0
    err = capsys.readouterr().err
    assert f"--image applies to packages that see; {tmp_path} is not one" in err


def test_transparency_is_composited_onto_white_as_transformers_does(tmp_path):
    from PIL import Image
    from transformers.image_transforms import convert_to_rgb

    rgba = random_image((9, 11), seed=3)
    alpha = np.random.default_rng(4).integers(0, 256, (9, 11, 1), dtype=np.uint8)
    path = tmp_path / "see-through.png"
    Image.fromarray(np.concatenate([rgba, alpha], axis=-1)).save(path)
    expected = convert_to_rgb(Image.open(path), return_numpy=True)
    np.testing.assert_array_equal(to_chw(open_image(path)), np.moveaxis(expected, -1, 0))


def test_build_keeps_the_processor_settings_and_skips_unreadable_ones(tmp_path, caplog):
    source = SimpleNamespace(source_dir=tmp_path, text_files={})
    (tmp_path / "processor_config.json").write_text('{"patch_size": 14}', encoding="utf-8")
    keep_processor_config(source)
    assert json.loads(source.text_files[HF_PROCESSOR_FILE]) == {"patch_size": 14}
    source.text_files.clear()
    (tmp_path / "processor_config.json").write_text("{not json", encoding="utf-8")
    keep_processor_config(source)
    assert source.text_files == {} and "processor_config.json" in caplog.text


def test_a_family_without_a_processor_is_named():
    with pytest.raises(MobiusError, match="no image processor for nova_vl packages"):
        processor_class("nova_vl")
