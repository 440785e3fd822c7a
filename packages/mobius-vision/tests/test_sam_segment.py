"""``mobius segment`` on a Segment Anything package matches transformers' processor and model.

A tiny random SAM and SAM-HQ (every parameter perturbed, :mod:`sam_parity_cases`) are saved with
transformers' ``SamProcessor`` (the PIL image processor at the model's 64-pixel size) and
built once each with the CLI. ``mobius segment`` (through ``mobius.cli.main``) on images of other
sizes and shapes must write the mask transformers gives: ``SamProcessor`` on the same
file and prompt, ``SamModel``, ``post_process_masks``, the mask of the best IoU score. A
pixel whose reference logit is within 1e-4 of the threshold may go either way. With
``--refine N`` transformers takes the same steps: N more ``forward`` calls, each with the
best low-resolution mask of the call before as ``input_masks``.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from PIL import Image
from sam_parity_cases.sam import SAM_OVERRIDES
from sam_parity_cases.sam_hq import SAM_HQ_OVERRIDES
from transformers import AutoConfig

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.sam_runner import MaskGenerator, SamImageProcessor
from mobius_vision.testing import make_random_sam

SIZE = 64
#: Reference logits this close to the threshold may binarise either way.
EDGE = 1e-4
#: (width, height) of the test images: landscape, portrait, smaller than the model's side.
IMAGE_SIZES = ((90, 60), (40, 75))


def reference_processor():
    image_processor = transformers.SamImageProcessorPil(
        size={"longest_edge": SIZE}, pad_size={"height": SIZE, "width": SIZE}
    )
    return transformers.SamProcessor(image_processor=image_processor)


#: family -> (model_type, config overrides, transformers class).
FAMILIES = {
    "sam": ("sam", SAM_OVERRIDES, "SamModel"),
    "sam_hq": ("sam_hq", SAM_HQ_OVERRIDES, "SamHQModel"),
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """``family -> (torch model, processor, package)``, each built once on first use."""
    cache = {}

    def build(family: str):
        if family not in cache:
            model_type, overrides, model_class = FAMILIES[family]
            root = tmp_path_factory.mktemp(family)
            model = make_random_sam(AutoConfig.for_model(model_type, **overrides), model_class)
            processor = reference_processor()
            model.save_pretrained(root / "hf")
            processor.save_pretrained(root / "hf")
            cache[family] = model, processor, build_with_cli(root / "hf", root / "onnx")
        return cache[family]

    return build


@pytest.fixture
def built(builds):
    """The tiny SAM's ``(torch model, processor, package)``."""
    return builds("sam")


def write_images(root, seed: int) -> list[str]:
    """Noise PNGs of IMAGE_SIZES (wide and tall) in ``root``."""
    rng = np.random.default_rng(seed)
    paths = []
    for index, (width, height) in enumerate(IMAGE_SIZES):
        path = root / f"image{index}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("sam-images"), seed=1)


def prompt_inputs(processor, path, points, labels, box) -> dict:
    """transformers' processor inputs of the image at ``path`` with one prompt."""
    image = Image.open(path).convert("RGB")
    prompt = {}
    if points:
        prompt.update(input_points=[[points]], input_labels=[[labels]])
    if box is not None:
        prompt.update(input_boxes=[[list(box)]])
    return processor(images=image, return_tensors="pt", **prompt)


def refined_forward(model, pixel_values, prompt: dict, refine: int):
    """transformers' ``forward``, then ``refine`` more with the best low-resolution mask of
    the call before as ``input_masks`` (``mobius segment --refine``'s steps)."""
    import torch

    with torch.no_grad():
        out = model(pixel_values=pixel_values, **prompt)
        for _ in range(refine):
            best = out.pred_masks[0, 0, int(out.iou_scores[0, 0].argmax())]
            out = model(pixel_values=pixel_values, **prompt, input_masks=best[None, None])
    return out


def reference_masks(model, processor, path, points, labels, box, refine: int = 0):
    """transformers' masks (logits upscaled to the image) and IoU scores for one prompt."""
    inputs = prompt_inputs(processor, path, points, labels, box)
    prompt = {
        k: v.float() if v.is_floating_point() else v
        for k, v in inputs.items()
        if k.startswith("input_")
    }
    out = refined_forward(model, inputs["pixel_values"], prompt, refine)
    logits = processor.post_process_masks(
        out.pred_masks, inputs["original_sizes"], inputs["reshaped_input_sizes"], binarize=False
    )[0][0]
    return logits.numpy(), out.iou_scores[0, 0].numpy(), inputs


def segment_cli(capsys, *args) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = main(["segment", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


PROMPTS = {
    "point": ([[30.0, 20.0]], [1], None),
    "points": ([[12.0, 40.0], [35.5, 9.0]], [1, 0], None),
    "box": ([], [], (5.0, 8.0, 33.0, 50.0)),
    "point_and_box": ([[20.0, 30.0]], [1], (2.0, 3.0, 38.0, 55.0)),
}


def prompt_arguments(points, labels, box) -> list[str]:
    flags = {1: "--point", 0: "--background-point"}
    arguments = []
    for (x, y), label in zip(points, labels, strict=True):
        arguments += [flags[label], f"{x},{y}"]
    if box is not None:
        arguments += ["--box", ",".join(map(str, box))]
    return arguments


def segment_images(capsys, package, images, prompt: str, refine: int, output) -> list[str]:
    """``mobius segment`` of ``images`` with ``PROMPTS[prompt]`` and ``--refine``: its lines,
    one per image, after checking that it succeeded."""
    code, lines, err = segment_cli(
        capsys,
        package,
        *images,
        *prompt_arguments(*PROMPTS[prompt]),
        "--refine",
        refine,
        "--output",
        output,
    )
    assert code == 0, err
    assert len(lines) == len(images)
    return lines


#: Mask-prompt runs after the first in the refinement cases.
REFINE = 2


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(
    ("prompt", "refine"),
    [(prompt, 0) for prompt in sorted(PROMPTS)] + [("point_and_box", REFINE)],
)
def test_segment_matches_transformers(prompt, refine, family, builds, images, capsys, tmp_path):
    model, processor, package = builds(family)
    points, labels, box = PROMPTS[prompt]
    lines = segment_images(capsys, package, images, prompt, refine, tmp_path)
    for path, line in zip(images, lines, strict=True):
        logits, scores, _ = reference_masks(model, processor, path, points, labels, box, refine)
        best = int(scores.argmax())
        listed = " ".join(f"{score:.4f}" for score in scores)
        assert line.startswith(f"{path}: mask {best} of {len(scores)} (IoU scores {listed})"), line
        written = np.asarray(Image.open(tmp_path / f"{path.rsplit('/', 1)[1][:-4]}.png")) > 127
        expected = logits[best] > 0
        assert written.shape == expected.shape
        differ = written != expected
        assert not (differ & (np.abs(logits[best]) > EDGE)).any(), f"{differ.sum()} pixels differ"
        assert 0 < expected.sum() < expected.size or prompt == "box", "a trivial mask proves little"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_refined_scores_match_transformers(family, builds, images):
    """``refine=N``: the IoU scores of the last run within 1e-5 of transformers' same steps,
    and different from the first run's (the mask prompt is read)."""
    model, processor, package = builds(family)
    generator = MaskGenerator(package)
    points, labels, box = PROMPTS["point"]
    for path in images[:1]:  # the CLI test refines both
        refined = generator.predict(path, points, labels, box, refine=REFINE)
        _, expected, _ = reference_masks(model, processor, path, points, labels, box, REFINE)
        np.testing.assert_allclose(refined.iou_scores, expected, atol=1e-5, rtol=0)
        first = generator.predict(path, points, labels, box).iou_scores
        assert np.abs(first - refined.iou_scores).max() > 1e-3, "the mask prompt changed nothing"
        assert refined.object_score is None  # SAM has no object score head


def test_refine_needs_a_mask_prompt_input(built, images):
    """A package built before the mask prompt refuses to refine, naming the missing input."""
    _, _, package = built
    generator = MaskGenerator(package)
    generator.mask_prompt_shape = None  # as a decoder without input_masks reads
    with pytest.raises(MobiusError, match="takes no mask prompt"):
        generator.predict(images[0], [[30.0, 20.0]], refine=1)


def test_pixels_and_coordinates_match_the_processor(built, images):
    """The numpy preprocessing gives the processor's pixels and scaled prompts."""
    _, processor, package = built
    ours = MaskGenerator(package).processor
    for path in images:
        image = Image.open(path).convert("RGB")
        inputs = processor(
            images=image,
            input_points=[[[[30.0, 20.0]]]],
            input_boxes=[[[5.0, 8.0, 33.0, 50.0]]],
            return_tensors="np",
        )
        pixels, resized = ours.pixels(np.asarray(image).transpose(2, 0, 1))
        np.testing.assert_allclose(pixels, inputs["pixel_values"][0], atol=1e-6, rtol=0)
        assert tuple(resized) == tuple(inputs["reshaped_input_sizes"][0])
        original = (image.height, image.width)
        np.testing.assert_allclose(
            ours.scale_coordinates(np.array([[30.0, 20.0]]), original),
            inputs["input_points"].reshape(-1, 2),
            rtol=1e-6,
        )
        np.testing.assert_allclose(
            ours.scale_coordinates(np.array([[5.0, 8.0], [33.0, 50.0]]), original).reshape(-1),
            inputs["input_boxes"].reshape(-1),
            rtol=1e-6,
        )


def test_refusals(built, images, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    _, _, package = built
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    refusals = {
        "say what to segment with --point": (package, images[0]),
        "--point takes 2 comma-separated numbers": (package, images[0], "--point", "a,b"),
        "--box takes 4 comma-separated numbers": (package, images[0], "--box", "1,2,3"),
        "--box takes the top-left corner then the bottom-right": (
            package,
            images[0],
            "--box",
            "30,30,10,10",
        ),
        "cannot read": (package, not_an_image, "--point", "1,1"),
        "no image file at": (package, tmp_path / "missing.png", "--point", "1,1"),
        "--refine takes a count of runs, 0 or more": (
            package,
            images[0],
            "--point",
            "1,1",
            "--refine",
            "-1",
        ),
    }
    for message, args in refusals.items():
        code, lines, err = segment_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err


def test_not_a_mask_generation_package(tmp_path):
    with pytest.raises(MobiusError, match="is not a mask-generation package"):
        MaskGenerator(tmp_path)


def test_bad_processor_settings_are_refused():
    with pytest.raises(MobiusError, match="resizes by longest_edge"):
        SamImageProcessor({"size": {"height": 10, "width": 10}})
    with pytest.raises(MobiusError, match="pad_size"):
        SamImageProcessor({"pad_size": {"height": -3, "width": 4}})
    with pytest.raises(MobiusError, match="more than pad_size"):
        SamImageProcessor({"pad_size": {"height": 512, "width": 512}})
    with pytest.raises(MobiusError, match="do_pad must be true or false"):
        SamImageProcessor({"do_pad": "yes"})


def test_bad_config_is_refused():
    """A mask decoder that cannot read the image embedding is a one-line ConfigError."""
    from mobius.errors import ConfigError
    from mobius_vision.models.sam import SamConfig

    decoder = {**SAM_OVERRIDES["mask_decoder_config"], "hidden_size": 24}
    overrides = {**SAM_OVERRIDES, "mask_decoder_config": decoder}
    with pytest.raises(ConfigError, match="positional encoding's width"):
        SamConfig.from_hf(AutoConfig.for_model("sam", **overrides))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mask_input_channels": 6}, "mask_input_channels 6 is not a multiple of 4"),
        ({"hidden_act": "no_such_act"}, "prompt encoder hidden_act"),
    ],
)
def test_bad_mask_prompt_config_is_refused(change, message):
    """A mask prompt encoder transformers could not run either is a one-line ConfigError."""
    from mobius.errors import ConfigError
    from mobius_vision.models.sam import SamConfig

    prompt = {**SAM_OVERRIDES["prompt_encoder_config"], **change}
    overrides = {**SAM_OVERRIDES, "prompt_encoder_config": prompt}
    with pytest.raises(ConfigError, match=message):
        SamConfig.from_hf(AutoConfig.for_model("sam", **overrides))
