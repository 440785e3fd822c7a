"""The torch-free processors of Qwen-VL, Idefics3/SmolVLM, Mistral 3, Fuyu and Mllama, and
``mobius generate --image`` on their packages, against transformers.

transformers' side is each case's real processor over its PIL image processor (the
torchvision ("fast") ones resize with torch and are not installed): ``Qwen2VLImageProcessorPil``
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL), ``Idefics3ImageProcessorPil``,
``SmolVLMImageProcessorPil``, ``PixtralImageProcessorPil``, ``FuyuImageProcessorPil`` and
``MllamaImageProcessorPil``.

- every tiny case of these families (``vl_parity_cases``, ``test_mllama_parity``): the
  package's processor (:mod:`mobius_vision.processing`) gives the same ids, masks,
  grids, sizes and tile ids as transformers', pixels within 1e-6, for images of several
  shapes, two images in one prompt where the family takes them, and text alone;
  Qwen's M-RoPE positions equal the torch model's ``get_rope_index``;
- one case a family is built once (split form) and ``mobius generate PKG PROMPT --image
  FILE`` prints what transformers' greedy ``generate`` decodes for the same prompt and
  image (Mllama through its own runner, :mod:`~mobius_vision.processing.cross_attention_runner`);
- what the processors refuse is a one-line error naming the problem.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_mllama_parity import CASES as MLLAMA_CASES
from test_mllama_parity import mllama_processor
from test_vl_generate import random_image, save_processor
from vl_parity_cases import all_cases

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for
from mobius_vision.testing import make_random_vl_model
from mobius_vision.testing._cross_vl_parity import open_gates

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "idefics3", "smolvlm", "mistral3")
FAMILIES += ("fuyu", "mllama")
MLLAMA_PROMPTS = ("<|image|> w5 w7 w9 w11", "w20 w21 <|image|> w4 w8 w6 w10 w12")


def _cases() -> dict[str, tuple]:
    """case -> (model_type, make_config, make_processor, options) of this file's families."""
    cases = {k: (*v, {})[:4] for k, v in all_cases().items() if v[0] in FAMILIES}
    for name, (model_type, config, sizes) in MLLAMA_CASES.items():
        options = dict(prompts=MLLAMA_PROMPTS, image_sizes=sizes, images_per_prompt=True)
        cases[name] = (model_type, lambda config=config: config, mllama_processor, options)
    return cases


CASES = _cases()
#: Families whose processor takes several images in one prompt.
MULTI_IMAGE = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "idefics3", "smolvlm")
MULTI_IMAGE += ("mistral3", "mllama")
SIZES = ((37, 45), (45, 20), (20, 45), (16, 16), (70, 50))


def hf_inputs(processor, options: dict, prompt: str, images: list, tensors: str = "np") -> dict:
    """The transformers processor's inputs for one prompt (its images as one list where
    the case says the processor wants a list per prompt)."""
    batch = images or None
    if images and options.get("images_per_prompt"):
        batch = [images]
    out = dict(processor(text=[prompt], images=batch, return_tensors=tensors))
    if tensors == "np":
        out = {k: np.asarray(v) for k, v in out.items()}
    return out


def package_like(case: str, directory):
    """A directory holding what a build keeps of the case's checkpoint and processor:
    config.json, the tokenizer files and the HF processor settings."""
    model_type, make_config, make_processor, options = CASES[case]
    config = make_config()
    processor = make_processor(config)
    config.save_pretrained(directory)
    save_processor(processor, directory)
    (directory / "processor_config.json").rename(directory / HF_PROCESSOR_FILE)
    return config, processor, processor_for(directory, model_type)


def assert_same_inputs(got: dict, expected: dict, what: str) -> None:
    assert sorted(got) == sorted(expected), what
    for name, value in expected.items():
        assert got[name].shape == value.shape, (name, what)
        if np.issubdtype(value.dtype, np.floating):
            assert got[name].dtype == np.float32, (name, what)
            np.testing.assert_allclose(
                got[name], value, atol=1e-6, rtol=0, err_msg=f"{name} {what}"
            )
        else:
            assert got[name].dtype == np.int64, (name, what)
            np.testing.assert_array_equal(got[name], value, err_msg=f"{name} {what}")


def prompts_and_images(case: str, mine) -> list[tuple[str, list]]:
    """The case's prompts with an image of each shape, two images in one prompt where the
    family takes them, and a prompt with no image."""
    model_type, *_, options = CASES[case]
    prompts = options["prompts"]
    pairs = [(prompts[i % len(prompts)], [random_image(size, i)]) for i, size in enumerate(SIZES)]
    if model_type in MULTI_IMAGE:
        pairs.append(
            (
                mine.with_placeholders("w5 w7", 2),
                [random_image(SIZES[0], 7), random_image(SIZES[1], 8)],
            )
        )
    return [*pairs, ("w5 w7 w9", [])]


@pytest.mark.parametrize("case", sorted(CASES))
def test_processor_matches_transformers(case, tmp_path):
    config, processor, mine = package_like(case, tmp_path)
    options = CASES[case][3]
    rope = options.get("rope_positions")
    model = make_random_vl_model(config) if rope else None
    for prompt, images in prompts_and_images(case, mine):
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = hf_inputs(processor, options, prompt, images)
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        if model is None:
            assert mine.rope_positions(got) is None
            continue
        if images:  # the model's own positions; without images its generate counts plainly
            positions, deltas = rope(model, expected)
        else:
            positions = np.broadcast_to(
                np.arange(got["input_ids"].shape[1]), (3, 1, got["input_ids"].shape[1])
            )
            deltas = np.zeros((1, 1), np.int64)
        got_positions, got_deltas = mine.rope_positions(got)
        np.testing.assert_array_equal(got_positions, positions, err_msg=what)
        np.testing.assert_array_equal(got_deltas, deltas, err_msg=what)


# --- mobius generate ---------------------------------------------------------------------

#: family -> the case built for ``mobius generate`` (given its first prompt) and the seed
#: of its weights: one whose greedy tokens depend on the image (checked by the test).
GENERATE = {
    "qwen2_vl": ("qwen2_vl-two-sizes", 0),
    "qwen2_5_vl": ("qwen2_5_vl-windows-two-sizes", 0),
    "qwen3_vl": ("qwen3_vl-deepstack-two-sizes", 0),
    "qwen3_vl_moe": ("qwen3_vl_moe-deepstack-dense-layer", 0),
    "idefics3": ("idefics3-split-two-shapes", 0),
    "smolvlm": ("smolvlm-split-two-shapes", 0),
    "mistral3": ("mistral3-ministral3-untied-two-sizes", 0),
    "fuyu": ("fuyu-persimmon", 1),
    "mllama": ("mllama", 1),
}


class Built:
    """One family's case: the torch model, its processor, and the built package."""

    def __init__(self, family: str, root) -> None:
        self.family, (self.case, seed) = family, GENERATE[family]
        _model_type, make_config, make_processor, self.options = CASES[self.case]
        self.prompt = self.options["prompts"][0]
        config = make_config()
        self.processor = make_processor(config)
        self.model = make_random_vl_model(config, seed=seed)
        if family == "mllama":  # its tanh gates start shut: open them so the image matters
            open_gates(self.model, seed)
        self.model.save_pretrained(root / "hf")
        save_processor(self.processor, root / "hf")
        self.package = build_with_cli(root / "hf", root / "split", "--form", "split")

    def greedy_text(self, images: list, prompt: str | None = None, max_new_tokens: int = 8) -> str:
        """transformers' greedy ``generate`` (of the case's prompt unless given), decoded as
        the runner prints it."""
        prompt = self.prompt if prompt is None else prompt
        inputs = hf_inputs(self.processor, self.options, prompt, images, "pt")
        inputs = {k: torch.as_tensor(np.asarray(v)) for k, v in inputs.items()}
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        return self.processor.tokenizer.decode(new, skip_special_tokens=True)


_BUILT: dict[str, Built] = {}


def build_once(family: str, tmp_path_factory) -> Built:
    """The family's :class:`Built`, made on first use (the tests share each package)."""
    if family not in _BUILT:
        _BUILT[family] = Built(family, tmp_path_factory.mktemp(family))
    return _BUILT[family]


@pytest.fixture(scope="module", params=sorted(GENERATE))
def built(request, tmp_path_factory):
    return build_once(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("images") / "wide.png"
    Image.fromarray(random_image((37, 45), seed=1)).save(path)
    return path


def generate_args(built, image_file) -> list[str]:
    return [str(built.package), built.prompt, "--image", str(image_file), "--max-new-tokens", "8"]


def rgb(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    expected = built.greedy_text([rgb(image_file)])
    capsys.readouterr()  # the build's lines
    assert built.greedy_text([random_image((37, 45), seed=2)]) != expected  # the image counts
    assert main(["generate", *generate_args(built, image_file)]) == 0
    out, err = capsys.readouterr()
    assert out == expected + "\n"
    assert "new tokens" in err


# Mllama has no text-only path: test_mllama_without_an_image_is_refused
@pytest.mark.parametrize("family", sorted(set(GENERATE) - {"mllama"}))
def test_generate_without_image_matches_transformers(family, tmp_path_factory, capsys):
    built = build_once(family, tmp_path_factory)
    expected = built.greedy_text([], prompt="w5 w7 w9")
    capsys.readouterr()  # the build's lines
    assert main(["generate", str(built.package), "w5 w7 w9", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"


# --- refusals ----------------------------------------------------------------------------


def one_line_error(capsys, *args: str) -> str:
    assert main(["generate", *args]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_fuyu_refuses_a_placeholder_and_a_second_image(tmp_path_factory, image_file, capsys):
    built = build_once("fuyu", tmp_path_factory)
    package, image = str(built.package), str(image_file)
    error = one_line_error(capsys, package, "|SPEAKER| w5", "--image", image)
    assert "a Fuyu prompt holds no |SPEAKER| placeholder" in error
    error = one_line_error(capsys, package, "w5", "--image", image, "--image", image)
    assert "Fuyu takes one image per prompt, got 2" in error


def test_processors_refuse_bad_images_and_settings(tmp_path):
    _config, _processor, qwen = package_like("qwen2_vl-two-sizes", tmp_path)
    with pytest.raises(MobiusError, match="too elongated for Qwen-VL"):
        qwen(qwen.with_placeholders("w5", 1), [np.zeros((2, 500, 3), np.uint8)])
    with pytest.raises(MobiusError, match=r"holds 0 <\|image_pad\|> placeholder\(s\) for 1 image"):
        qwen("w5", [random_image((16, 16))])
    qwen.settings.image["max_pixels"] = "many"
    with pytest.raises(MobiusError, match="setting max_pixels must be an int"):
        qwen(qwen.with_placeholders("w5", 1), [random_image((16, 16))])


def test_mllama_without_an_image_is_refused(tmp_path_factory):
    from mobius_vision.processing.cross_attention_runner import CrossAttentionGenerator

    built = build_once("mllama", tmp_path_factory)
    generator = CrossAttentionGenerator(built.package)
    with pytest.raises(MobiusError, match=r"needs an image \(--image\)"):
        list(generator.stream("w5 w7"))
