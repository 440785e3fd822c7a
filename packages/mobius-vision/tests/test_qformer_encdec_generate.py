"""The Q-Former and image encoder–decoder long tail (InstructBLIP-Video...): the torch-free
processor and ``mobius generate``, against transformers.

Each family's tiny parity case (``vl_parity_cases/<family>.py``) is made as a random model
with every parameter perturbed, saved with its processor and built once with the CLI
(split form). Then the package's processor gives transformers' inputs, ``mobius generate``
prints what transformers' greedy ``generate`` decodes (and another image changes it, so the
test can fail), and bad input is a one-line error.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _vl_built import BuiltVL
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases.instructblipvideo import CASES as INSTRUCTBLIPVIDEO_CASES

from mobius.cli import main
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for

#: A video's frames: InstructBLIP-Video reads four.
FRAME_SIZES = ((37, 45), (45, 20), (20, 45), (16, 16))
PROMPT = "Question: w5 w7 w9 Answer:"


def png_files(folder, sizes, seed: int) -> list:
    from PIL import Image

    paths = []
    for i, size in enumerate(sizes):
        path = folder / f"frame{seed}-{i}.png"
        Image.fromarray(random_image(size, seed=seed + i)).save(path)
        paths.append(path)
    return paths


def rgb(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def cli(package, prompt: str, images, capsys) -> tuple[int, str, str]:
    """``mobius generate`` (8 new tokens at most): exit code, stdout, stderr."""
    capsys.readouterr()  # earlier lines (the build's)
    args = [str(package), prompt, *(a for image in images for a in ("--image", str(image)))]
    code = main(["generate", *args, "--max-new-tokens", "8"])
    out, err = capsys.readouterr()
    return code, out, err


class BuiltVideo(BuiltVL):
    """InstructBLIP-Video's case: the frames of one video go as one list."""

    def __init__(self, root) -> None:
        super().__init__(
            INSTRUCTBLIPVIDEO_CASES["instructblipvideo-opt"], root, "instructblipvideo"
        )

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np") -> dict:
        if not images:  # the language model alone reads a prompt without a video
            return dict(self.processor.tokenizer([prompt], return_tensors=tensors))
        return super().hf_inputs(prompt, [images], tensors)

    def greedy_tokens(self, prompt: str, images: list, max_new_tokens: int) -> list[int]:
        if images:
            new = super().greedy_tokens(prompt, images, max_new_tokens)
        else:
            import torch

            inputs = self.hf_inputs(prompt, [], "pt")
            with torch.no_grad():
                out = self.model.language_model.generate(
                    **inputs, max_new_tokens=max_new_tokens, do_sample=False
                )
            new = out[0, inputs["input_ids"].shape[1] :].tolist()
        eos = self.model.generation_config.eos_token_id
        if new and new[-1] == eos:  # the runner stops at it without printing it
            new = new[:-1]
        return new


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return BuiltVideo(tmp_path_factory.mktemp("instructblipvideo"))


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> list:
    return png_files(tmp_path_factory.mktemp("frames"), FRAME_SIZES, seed=1)


def test_video_processor_matches_transformers(video):
    mine = processor_for(video.package, "instructblipvideo")
    for seed in (0, 4):
        images = [random_image(size, seed + i) for i, size in enumerate(FRAME_SIZES)]
        expected = {k: np.asarray(v) for k, v in video.hf_inputs(PROMPT, images).items()}
        assert_same_inputs(mine(PROMPT, images), expected, f"seed {seed}")
    expected = {k: np.asarray(v) for k, v in video.hf_inputs(PROMPT, []).items()}
    assert_same_inputs(mine(PROMPT, []), expected, "no video")


def test_video_processor_reads_the_nested_video_settings(video, tmp_path):
    """transformers 5 saves the video processor's settings under ``video_processor``."""
    package = tmp_path / "package"
    shutil.copytree(video.package, package)
    settings = json.loads((package / HF_PROCESSOR_FILE).read_text(encoding="utf-8"))
    resized = dict(settings.pop("image_processor"), size={"height": 8, "width": 8})
    settings["video_processor"] = resized
    (package / HF_PROCESSOR_FILE).write_text(json.dumps(settings), encoding="utf-8")
    frames = [random_image(size, i) for i, size in enumerate(FRAME_SIZES)]
    assert processor_for(package, "instructblipvideo")(PROMPT, frames)["pixel_values"].shape == (
        1, 4, 3, 8, 8,
    )  # fmt: skip


def test_generate_with_video_matches_transformers(video, frames, tmp_path, capsys):
    expected = video.greedy_text(PROMPT, [rgb(f) for f in frames])
    # the tiny model's text depends on the frames, so a wrong pixel shows
    other = [random_image(size, seed=20 + i) for i, size in enumerate(FRAME_SIZES)]
    assert video.greedy_text(PROMPT, other) != expected
    code, out, err = cli(video.package, PROMPT, frames, capsys)
    assert code == 0 and "new tokens" in err
    assert out == expected + "\n"


def test_generate_without_video_matches_transformers(video, capsys):
    expected = video.greedy_text("w5 w7 w9", [])
    code, out, _ = cli(video.package, "w5 w7 w9", [], capsys)
    assert code == 0 and out == expected + "\n"


@pytest.mark.parametrize(
    ("prompt", "count", "message"),
    [
        (PROMPT, 1, "reads a video as 4 frames: give --image 4 times (got 1 image(s))"),
        ("<video> w5", 4, "leave <video> out of it"),
    ],
)
def test_bad_video_input_is_a_one_line_error(video, frames, capsys, prompt, count, message):
    code, _, err = cli(video.package, prompt, frames[:count], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, lines
    assert message in lines[0]


# --- BLIP captioning: an image-to-text package (encoder graph, cached decoder) -----------


class BuiltBlip:
    """A tiny random BLIP (its parity case's config, its weights sharpened so the text
    depends on the image) saved with BLIP's PIL image processor and a tiny tokenizer, then
    built with the CLI."""

    def __init__(self, root) -> None:
        from test_image_to_text_parity import blip as blip_config
        from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

        from mobius.testing import build_with_cli, perturb_parameters, tiny_tokenizer
        from mobius_vision.testing import make_random_image_to_text

        config = blip_config()
        self.text = config.text_config
        self.model = make_random_image_to_text(config, seed=0)
        perturb_parameters(self.model, seed=1, scale=0.2)
        size = config.vision_config.image_size
        self.image_processor = BlipImageProcessorPil(size={"height": size, "width": size})
        specials = {"[DEC]": self.text.bos_token_id, "[SEP]": self.text.sep_token_id}
        self.tokenizer = tiny_tokenizer(self.text.vocab_size, specials)
        hf = root / "hf"
        self.model.save_pretrained(hf)
        self.image_processor.save_pretrained(hf)  # preprocessor_config.json, as the hub's
        self.tokenizer.save_pretrained(hf)
        self.package = build_with_cli(hf, root / "package")

    def greedy_text(self, prompt: str, image: np.ndarray, max_new_tokens: int = 8) -> str:
        """transformers' greedy ``generate`` from what BLIP's processor gives a BERT tokenizer:
        ``[CLS] prompt [SEP]`` (generate swaps the first for ``[DEC]``, drops the last)."""
        import torch

        words = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([[self.text.bos_token_id, *words, self.text.sep_token_id]])
        pixels = self.image_processor(image, return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            out = self.model.generate(
                pixel_values=pixels, input_ids=ids, do_sample=False, max_new_tokens=max_new_tokens
            )
        new = out[0, len(words) + 1 :].tolist()
        if new and new[-1] == self.text.sep_token_id:  # the runner stops at it unprinted
            new = new[:-1]
        return self.tokenizer.decode(new, skip_special_tokens=True)


@pytest.fixture(scope="module")
def blip(tmp_path_factory):
    return BuiltBlip(tmp_path_factory.mktemp("blip"))


def test_blip_pixels_match_transformers(blip):
    from mobius_vision.image_to_text_runner import blip_pixels
    from mobius_vision.processing._image import to_chw
    from mobius_vision.processing._settings import read_json_object

    mine = blip_pixels(read_json_object(blip.package / "preprocessor_config.json"))
    for i, size in enumerate(FRAME_SIZES):
        image = random_image(size, seed=i)
        expected = blip.image_processor(image, return_tensors="np")["pixel_values"]
        np.testing.assert_allclose(mine(to_chw(image))["pixel_values"], expected, atol=1e-6)


@pytest.mark.parametrize("prompt", ["", "w5 w7"])
def test_blip_generate_matches_transformers(blip, frames, prompt, capsys):
    expected = blip.greedy_text(prompt, rgb(frames[0]))
    # the tiny model's text depends on the image, so a wrong pixel shows
    assert blip.greedy_text(prompt, random_image((37, 45), seed=30)) != expected
    code, out, err = cli(blip.package, prompt, frames[:1], capsys)
    assert code == 0 and "new tokens" in err, err
    assert out == expected + "\n"


def test_blip_two_images_are_a_one_line_error(blip, frames, capsys):
    code, _, err = cli(blip.package, "w5", frames[:2], capsys)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, lines
    assert "reads one image: give --image FILE once (got 2)" in lines[0]


@pytest.mark.parametrize("head", ["BlipForQuestionAnswering", "BlipForImageTextRetrieval"])
def test_blip_other_heads_are_refused(head):
    from test_image_to_text_parity import blip as blip_config

    from mobius.errors import ConfigError
    from mobius_vision.models.blip import BlipConfig

    config = blip_config()
    config.architectures = [head]
    with pytest.raises(ConfigError, match=f"blip checkpoint of {head}: mobius builds BLIP"):
        BlipConfig.from_hf(config)
