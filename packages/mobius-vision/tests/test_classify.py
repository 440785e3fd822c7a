"""``mobius classify`` on images matches transformers' own pipelines on tiny random models.

Each case is a tiny random model (every parameter perturbed) saved with its image
processor (transformers' PIL backend: ViT, ConvNeXt's crop_pct resize, CLIP's
shortest edge and centre crop, SigLIP's square resize) and, for the zero-shot
dual encoders, a word-level tokenizer that knows the hypothesis template's words.
It is built once with the CLI; ``mobius classify`` (through ``mobius.cli.main``) must
print the labels transformers' ``image-classification`` / ``zero-shot-image-classification``
pipeline gives for the same image files, in the same order, with the same scores
(within 1e-5), on five images of different sizes and modes (one EXIF-rotated, one
transparent).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import transformers
from PIL import Image
from test_zero_shot_parity import TEXT, VISION
from transformers import AutoConfig
from vision_parity_cases.convnext import CONVNEXT
from vision_parity_cases.vit import VIT

import mobius_vision
from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_vision.processing import classification as processing
from mobius_vision.testing import make_random_dual_encoder, make_random_vision_model

SCORE_ATOL = 1e-5
LABELS = {0: "tabby, tabby cat", 1: "tiger", 2: "sports car"}
CANDIDATES = ["cat", "small dog", "red sports car"]

#: case -> (model_type, config, image processor): the classifiers, ViT and a conv net.
CLASSIFIERS = {
    "vit": (
        "vit",
        VIT,
        lambda: transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}),
    ),
    # ConvNeXt's processor resizes the shortest edge to 32 / crop_pct, then crops 32x32.
    "convnext": (
        "convnext",
        CONVNEXT,
        lambda: transformers.ConvNextImageProcessorPil(size={"shortest_edge": 32}, crop_pct=0.875),
    ),
}
#: case -> (model_type, config, image processor, tokenizer input names): the dual encoders.
ZERO_SHOT = {
    "clip": (
        "clip",
        dict(text_config=TEXT, vision_config=VISION, projection_dim=8),
        lambda: transformers.CLIPImageProcessorPil(
            size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}
        ),
        ["input_ids", "attention_mask"],
    ),
    # SigLIP's texts are padded to 64 tokens and read without a mask, as its tokenizer gives them.
    "siglip": (
        "siglip",
        dict(
            text_config=dict(TEXT, projection_size=24, max_position_embeddings=64),
            vision_config=VISION,
        ),
        lambda: transformers.SiglipImageProcessorPil(size={"height": 16, "width": 16}),
        ["input_ids"],
    ),
}


def word_tokenizer(input_names: list[str]):
    """A word-level tokenizer that knows the hypothesis template and the candidate labels'
    words, ending each text with ``</s>`` (id 3, the tiny configs' end token), padding right."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = "This is a photo of . cat small dog red sports car".split()
    vocab = {"<unk>": 0, "<pad>": 1, "<s>": 2, "</s>": 3}
    vocab.update({word: i for i, word in enumerate(words, start=len(vocab))})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        padding_side="right",
        model_input_names=input_names,
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Images of different sizes and modes: RGB noise, a JPEG gradient, greyscale, a JPEG
    stored on its side (EXIF orientation 6) and a half-transparent RGBA PNG."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    Image.fromarray(noise).save(folder / "noise.png")
    ramp = np.linspace(0, 255, 64)[None, :, None] * np.linspace(0.2, 1, 48)[:, None, None]
    gradient = np.clip(ramp * [1.0, 0.5, 0.8] + rng.normal(0, 20, (48, 64, 3)), 0, 255)
    Image.fromarray(gradient.astype(np.uint8)).save(folder / "gradient.jpg", quality=90)
    grey = rng.integers(0, 256, (30, 30), dtype=np.uint8)
    Image.fromarray(grey, mode="L").save(folder / "grey.png")
    sideways = Image.fromarray(rng.integers(0, 256, (24, 44, 3), dtype=np.uint8))
    exif = sideways.getexif()
    exif[0x0112] = 6  # the pipelines turn it upright: 44 x 24
    sideways.save(folder / "sideways.jpg", exif=exif)
    rgba = rng.integers(0, 256, (36, 36, 4), dtype=np.uint8)
    Image.fromarray(rgba, mode="RGBA").save(folder / "transparent.png")
    names = ("noise.png", "gradient.jpg", "grey.png", "sideways.jpg", "transparent.png")
    return [str(folder / name) for name in names]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(case)``: ``(hf_dir, package_dir)`` of a case, made and built once per module."""
    root = tmp_path_factory.mktemp("classify")

    @functools.cache
    def build(case: str, head: str = "image-classification"):
        hf_dir, out = root / f"hf-{case}-{head}", root / f"onnx-{case}-{head}"
        if case in CLASSIFIERS:
            model_type, overrides, processor = CLASSIFIERS[case]
            config = AutoConfig.for_model(model_type, **overrides, id2label=LABELS)
            model = make_random_vision_model(config, head)
        else:
            model_type, overrides, processor, input_names = ZERO_SHOT[case]
            model = make_random_dual_encoder(AutoConfig.for_model(model_type, **overrides))
            word_tokenizer(input_names).save_pretrained(hf_dir)
        model.save_pretrained(hf_dir)
        processor().save_pretrained(hf_dir)
        extra = ("--head", head) if case in CLASSIFIERS else ()
        return hf_dir, build_with_cli(hf_dir, out, *extra)

    return build


def classify_cli(capsys, *args) -> tuple[int, list[str], str]:
    capsys.readouterr()  # what came before (a build's report) is not the command's
    code = main(["classify", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def parse_line(line: str) -> tuple[str, list[tuple[str, float]]]:
    """``path: label score; label score`` -> ``(path, [(label, score), ...])``."""
    path, _, rest = line.partition(": ")
    pairs = [pair.rsplit(" ", 1) for pair in rest.split("; ")]
    return path, [(label, float(score)) for label, score in pairs]


def assert_same_ranking(got: list[tuple[str, float]], expected: list[dict]) -> None:
    assert [label for label, _ in got] == [e["label"] for e in expected]
    np.testing.assert_allclose(
        [score for _, score in got], [e["score"] for e in expected], atol=SCORE_ATOL, rtol=0
    )


def assert_images_matter(expected: list[list[dict]]) -> None:
    """A model that scores every image alike would make the comparison prove little."""
    firsts = [sorted(e, key=lambda d: d["label"])[0]["score"] for e in expected]
    assert max(firsts) - min(firsts) > 1e-3, f"the images score alike: {expected}"


@pytest.mark.parametrize("case", sorted(CLASSIFIERS))
def test_classifier_matches_the_pipeline(case, built, images, capsys):
    hf_dir, package = built(case)
    pipe = transformers.pipeline("image-classification", model=str(hf_dir))
    expected = [pipe(path, top_k=2) for path in images]
    assert_images_matter([pipe(path) for path in images])

    code, lines, err = classify_cli(capsys, package, *images, "--top", "2")
    assert code == 0, err
    assert [parse_line(line)[0] for line in lines] == images
    for line, reference in zip(lines, expected, strict=True):
        assert_same_ranking(parse_line(line)[1], reference)

    # The API: every label (top 5 of 3), exact floats; the pixels equal the processor's.
    for got, path in zip(mobius_vision.classify(package, images), images, strict=True):
        assert_same_ranking(got, pipe(path))
    classifier = mobius_vision.classifier.open_image_classifier(package)
    reference = pipe.image_processor(transformers.image_utils.load_image(images[1]))
    np.testing.assert_array_equal(
        classifier.pixels(images[1]), np.asarray(reference["pixel_values"], np.float32)
    )


@pytest.mark.parametrize("case", sorted(ZERO_SHOT))
def test_zero_shot_matches_the_pipeline(case, built, images, capsys):
    hf_dir, package = built(case)
    pipe = transformers.pipeline("zero-shot-image-classification", model=str(hf_dir))
    expected = [pipe(path, candidate_labels=CANDIDATES) for path in images]
    assert_images_matter(expected)

    code, lines, err = classify_cli(capsys, package, *images, "--labels", ",".join(CANDIDATES))
    assert code == 0, err
    for line, path, reference in zip(lines, images, expected, strict=True):
        assert parse_line(line)[0] == path
        assert_same_ranking(parse_line(line)[1], reference)
    got = mobius_vision.classify(package, images[0], labels=CANDIDATES, top=2)
    assert_same_ranking(got[0], expected[0][:2])


def test_refusals(built, images, capsys, tmp_path):
    """Each is one line on stderr, exit code 1, and names the problem."""
    _, clip = built("clip")
    _, vit = built("vit")
    _, encoder = built("vit", "none")
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not an image")
    refusals = {
        "is a zero-shot classifier: give the candidate labels with --labels": (clip, images[0]),
        "cannot read": (vit, not_an_image),
        "no image file at": (vit, tmp_path / "missing.png"),
        "--labels applies to zero-shot packages": (vit, images[0], "--labels", "a,b"),
        "has no classification head": (encoder, images[0]),
        "no classifier accepts": (tmp_path, images[0]),
    }
    for message, args in refusals.items():
        code, lines, err = classify_cli(capsys, *args)
        assert code == 1 and not lines, (message, err)
        assert len(err.strip().splitlines()) == 1 and message in err, err


def test_classify_stays_a_function_once_its_module_is_imported():
    import mobius_vision.classifier  # noqa: F401

    assert callable(mobius_vision.classify)


@pytest.mark.parametrize("name", sorted(processing.FAMILIES))
def test_processor_defaults_match_transformers(name, images):
    """A config that names only its class, and an older one (a lone int size), give the
    pixels of transformers' PIL processor of that class, exactly."""
    reference_class = getattr(transformers, f"{name}Pil")
    image = transformers.image_utils.load_image(images[0])
    for settings in (
        {},
        {"size": 40, "crop_pct": 0.8} if name.startswith("ConvNext") else {"size": 40},
    ):
        ours = processing.image_processor({"feature_extractor_type": name, **settings})
        theirs = reference_class(**settings)(image)["pixel_values"][0]
        np.testing.assert_array_equal(ours(image), theirs, err_msg=f"{name} {settings}")


def test_unknown_processor_is_refused():
    with pytest.raises(
        MobiusError, match="no image processor like transformers' LevitImageProcessor"
    ):
        processing.image_processor({"image_processor_type": "LevitImageProcessorFast"})
