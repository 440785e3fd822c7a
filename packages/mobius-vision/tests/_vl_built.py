"""One tiny VL case made ready for the generate tests: the torch model, its processor,
the checkpoint directory and the split package built with the CLI.

The generate test files subclass :class:`BuiltVL` where their family differs (how the
processor is made or called); the rest is the same for every family.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch

from mobius.cli import main
from mobius.testing import build_with_cli, perturb_parameters
from mobius_vision.processing import processor_for
from mobius_vision.testing import make_random_vl_model

#: The text-only prompt of the generate checks (ids of the cases' tiny tokenizers).
TEXT_PROMPT = "w5 w7 w9"
#: The processor checks' image sizes: wide, tall, a side under one merge block, large.
SIZES = ((37, 45), (45, 20), (5, 30), (70, 50))


def save_processor(processor, directory) -> None:
    """The processor's files as ``save_pretrained`` writes them: the tokenizer, and
    ``processor_config.json`` with the image processor nested. (The cases' subclasses, made
    to run without a video processor, cannot ``save_pretrained``: the settings are those
    of the transformers class's ``__init__``.)"""
    processor.tokenizer.save_pretrained(directory)
    if hasattr(processor, "qformer_tokenizer"):  # InstructBLIP's, in a folder of its own
        processor.qformer_tokenizer.save_pretrained(directory / "qformer_tokenizer")
    base = next(c for c in type(processor).__mro__ if c.__module__.startswith("transformers."))
    skip = {"self", "image_processor", "tokenizer", "video_processor", "chat_template", "kwargs"}
    settings = {"image_processor": processor.image_processor.to_dict()}
    for audio in ("feature_extractor", "audio_processor"):  # as the processor names it
        if hasattr(processor, audio):  # nested as transformers 5 does; its JSON form (Gemma
            # 4's holds its mel filters as an array)
            settings[audio] = json.loads(getattr(processor, audio).to_json_string())
    for name in inspect.signature(base.__init__).parameters:
        value = getattr(processor, name, None)
        if name not in skip and isinstance(value, (int, float, str, list)):
            settings[name] = value
    (directory / "processor_config.json").write_text(json.dumps(settings), encoding="utf-8")


class BuiltVL:
    """A parity case ``(model_type, make_config, make_processor[, options])`` built under ``root``."""

    #: Perturb the weights again, more: near its init a tiny model says the same words
    #: whatever the image; larger weights make its greedy text depend on the pixels,
    #: so the test can fail.
    sharpen = True

    def __init__(self, case: tuple, root, family: str = "") -> None:
        _model_type, make_config, make_processor, *options = case
        self.family = family
        self.options = options[0] if options else {}
        if not hasattr(self, "prompt"):  # a subclass may have chosen its own
            #: the case's first prompt (with its image placeholder), where it names prompts
            self.prompt = self.options.get("prompts", [None])[0]
        config = make_config()
        self.processor = self.make_processor(make_processor, config)
        self.model = self.make_model(config)
        if self.sharpen:
            perturb_parameters(self.model, seed=1, scale=0.2)
        self.hf = root / "hf"
        self.model.save_pretrained(self.hf)
        save_processor(self.processor, self.hf)
        self.package = build_with_cli(self.hf, root / "split", "--form", "split")

    def make_model(self, config):
        """The random transformers model saved as the checkpoint."""
        return make_random_vl_model(config, seed=0)

    def make_processor(self, make_processor, config):
        """The case's transformers processor for ``config``."""
        return make_processor(config)

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np") -> dict:
        """The transformers processor's inputs for one prompt and its images."""
        return dict(self.processor(text=[prompt], images=images or None, return_tensors=tensors))

    def greedy_tokens(self, prompt: str, images: list, max_new_tokens: int) -> list[int]:
        """The new tokens of transformers' greedy ``generate``."""
        inputs = self.hf_inputs(prompt, images, "pt")
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return out[0, inputs["input_ids"].shape[1] :].tolist()

    def greedy_text(self, prompt: str, images: list, max_new_tokens: int = 8) -> str:
        """transformers' greedy ``generate``, decoded as the runner prints it."""
        new = self.greedy_tokens(prompt, images, max_new_tokens)
        return self.processor.tokenizer.decode(new, skip_special_tokens=True)


def random_image(size, seed: int = 0) -> np.ndarray:
    """A random RGB image ``[height, width, 3]`` uint8."""
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def rgb(path) -> np.ndarray:
    """An image file as the runner reads it: RGB uint8 ``[height, width, 3]``."""
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def assert_generate_with_image(built: BuiltVL, image_file, capsys) -> None:
    """``mobius generate PKG PROMPT --image FILE`` prints transformers' greedy text.

    The tiny model's text must depend on the image (another image changes it), so a wrong
    pixel, position or placement shows.
    """
    expected = built.greedy_text(built.prompt, [rgb(image_file)])
    assert built.greedy_text(built.prompt, [random_image((37, 45), seed=2)]) != expected
    capsys.readouterr()  # the build's lines
    args = [str(built.package), built.prompt, "--image", str(image_file)]
    assert main(["generate", *args, "--max-new-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    assert out == expected + "\n"
    assert "new tokens" in err


def assert_generate_without_image(built: BuiltVL, capsys) -> None:
    """A text-only prompt through ``mobius generate`` prints transformers' greedy text."""
    expected = built.greedy_text(TEXT_PROMPT, [])
    assert expected  # some text to compare
    capsys.readouterr()
    assert main(["generate", str(built.package), TEXT_PROMPT, "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"


def assert_miscounted_placeholders_fail(built: BuiltVL, image_file, capsys) -> None:
    """Two image placeholders for one image: a one-line error, nothing generated."""
    token = processor_for(built.package, built.family).image_token
    capsys.readouterr()
    prompt = f"w5 {token} w7 {token}"
    assert main(["generate", str(built.package), prompt, "--image", str(image_file)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"holds 2 {token} placeholder(s) for 1 image(s)" in lines[0]


def built_fixture(families: dict[str, tuple]):
    """A module-scoped ``built`` fixture: one :class:`BuiltVL` per family of ``families``
    (family -> its parity case)."""

    @pytest.fixture(scope="module", params=sorted(families))
    def built(request, tmp_path_factory):
        family = request.param
        return BuiltVL(families[family], tmp_path_factory.mktemp(family), family)

    return built


def assert_processor_and_positions_match(built: BuiltVL, axes: int = 3) -> None:
    """mobius's processor of the package gives transformers' inputs for an image of each of
    :data:`SIZES`, two images in one prompt and none; its M-RoPE positions equal the
    model's own ``get_rope_index`` (a text-only prompt counts plainly over ``axes``
    streams)."""
    from test_vl_processors_b import assert_same_inputs

    mine = processor_for(built.package, built.family)
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    cases += [(mine.with_placeholders("w5 w7", 2), two), (TEXT_PROMPT, [])]
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = {k: np.asarray(v) for k, v in built.hf_inputs(prompt, images).items()}
        got = mine(prompt, images)
        assert_same_inputs(got, expected, what)
        positions, deltas = mine.rope_positions(got)
        if images:
            want_positions, want_deltas = built.options["rope_positions"](built.model, expected)
        else:  # without images its generate counts plainly
            length = got["input_ids"].shape[1]
            want_positions = np.broadcast_to(np.arange(length), (axes, 1, length))
            want_deltas = np.zeros((1, 1), np.int64)
        np.testing.assert_array_equal(positions, want_positions, err_msg=what)
        np.testing.assert_array_equal(deltas, want_deltas, err_msg=what)


def write_image_and_wav(folder, samples: int, rate: int):
    """A wide random PNG (37x45) and a 16-bit mono PCM WAV of ``samples`` random samples at
    ``rate`` in ``folder``: their paths, for the ``--image`` / ``--audio`` tests."""
    import wave

    from PIL import Image

    from mobius_vision.testing import random_clips

    image = folder / "wide.png"
    Image.fromarray(random_image((37, 45), seed=1)).save(image)
    sound = folder / "noise.wav"
    clip = random_clips((samples,), seed=3)[0]
    with wave.open(str(sound), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(clip, -1, 1) * 32767).astype("<i2").tobytes())
    return image, sound


def assert_one_line_refusals(capsys, command: str, refusals: dict) -> None:
    """Each ``message -> args`` of ``refusals`` run as ``mobius COMMAND *args`` exits 1 with
    nothing on stdout and one stderr line containing ``message``."""
    for message, args in refusals.items():
        capsys.readouterr()
        code = main([command, *map(str, args)])
        out, err = capsys.readouterr()
        assert code == 1 and not out, (message, out, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err
