"""``mobius build --validate`` for mobius-vision's tasks (the contract: :mod:`mobius.validate`).

Each validator runs the built graphs on a fixed sample and, with torch, the source as
transformers reads it (``from_pretrained``, float32) on the same sample, through the
parity kit's compare functions (:mod:`mobius_vision.testing`):

- ``image-classification``: two random images' pixels at the config's image size;
- ``semantic-segmentation``: two random images' pixels at the graph's size, the logits
  compared relative to their scale above 1 (the segmentation parity kit's measure);
- ``mask-generation``: two random images' pixels at the graph's size and three prompts
  (points, a point and a box each, boxes alone) through both graphs;
- ``depth-estimation``: two random images through the package's image processor (and
  random prompt depths for Prompt Depth Anything), the depth compared relative to its
  scale above 1 (the depth parity kit's measure);
- ``object-detection``: two random images at the config's image size (YOLOS) or
  :data:`DETECTION_IMAGE_SIZE`, the second padded where the graph takes ``pixel_mask``;
- ``zero-shot-image-classification``: three token sequences of random ids (padded at
  the end, ended by the end token) against the same two images;
- ``text-prompted-segmentation``: two prompts of random ids and two random images at the
  image graph's size, every image with every prompt;
- ``vision-language`` (either form) and ``cross-attention-vision-language``: one short
  prompt with one random image (seeded) through the family's processor, the prefill
  then greedy decode steps through both caches;
- ``audio-vision-language``: the vision–language sample with one random audio clip too
  (a whole Omni checkpoint compared through its thinker; none for a package without an
  audio graph);
- ``image-to-text``: two random sources (pixels at the encoder's size, or Pix2Struct's
  patches) encoded, two decoder tokens prefilled, then greedy steps through both caches,
  and the stream checked against transformers' ``generate``. The processor is mobius's torch-free
  one (:mod:`mobius_vision.processing`, what ``mobius generate`` feeds), or, for a
  family it lacks, transformers' own read from the source (its numpy path).

Without torch the same samples go through the graphs alone (a smoke run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from mobius.errors import MobiusError
from mobius.validate import SAMPLE_DECODE_STEPS, ValidationReport, load_reference, smoke_report

#: The seed of every random sample (images, pixels, token ids).
SEED = 0
#: Images in the classification and zero-shot samples.
SAMPLE_IMAGES = 2
#: The zero-shot sample's texts: a batch size other than the images' (a transposed
#: similarity cannot pass).
SAMPLE_TEXT_LENGTHS = (7, 4, 5)
#: The vision–language sample's text, after the family's image placeholder.
SAMPLE_PROMPT = "Describe this picture in a few words."
#: The sample image's size when the processor's settings name none.
DEFAULT_IMAGE_SIZE = (48, 64)
#: The largest image side, pixel or patch count read from a config (a stranger's file).
_MAX_SIDE = 8192


def _config(package_dir: Path):
    """The package's ``config.json`` (the source's, as the build kept it) as the build reads
    it: transformers' ``AutoConfig`` (its class's defaults for the fields it omits)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(package_dir), trust_remote_code=False)
    except Exception as exc:  # the reader's refusal, in one line
        raise MobiusError(
            f"--validate: transformers cannot read {package_dir}/config.json: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from None


def _side(value, name: str, low: int = 1) -> int:
    """``value``, checked to be an integer in ``[low, _MAX_SIDE]`` (it comes from a file)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= _MAX_SIDE:
        raise MobiusError(f"--validate: {name} is {value!r}, not a usable size")
    return value


def _count(section, name: str, default: int | None, low: int = 1) -> int:
    """An integer field of a config (or its sub-config), checked (:func:`_side`)."""
    return _side(getattr(section, name, default), f"config.json's {name}", low)


def _image_geometry(section) -> SimpleNamespace:
    """``image_size`` (an int or a [height, width] pair) and ``num_channels`` of a vision config."""
    size = getattr(section, "image_size", 224)
    pair = size if isinstance(size, (list, tuple)) and len(size) == 2 else [size, size]
    sides = [_side(side, "config.json's image_size") for side in pair]
    return SimpleNamespace(image_size=sides, num_channels=_count(section, "num_channels", 3))


def _run(session, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of ``session`` by name, for the feeds it takes."""
    names = {i.name for i in session.get_inputs()}
    values = session.run(None, {k: v for k, v in feeds.items() if k in names})
    return dict(zip([o.name for o in session.get_outputs()], values, strict=True))


def _reference_name(model) -> str:
    return f"transformers {type(model).__name__}"


# -- image classification -------------------------------------------------------------


def validate_image_classification(package_dir: Path, source: Path, record: dict, reference: bool):
    """The graph's outputs (features, pooled output, logits) on two random images."""
    from mobius_vision.testing._vision_parity import compare_vision, random_pixels
    from mobius_vision.vl_model import cpu_session

    session = cpu_session(package_dir / "model.onnx")
    config = _config(package_dir)
    if hasattr(config, "num_patches") and not hasattr(config, "image_size"):
        raise MobiusError(  # transformers takes its patches, the graph whole images
            f"--validate: no validator yet for a lone {config.model_type} tower (NaFlex patches)"
        )
    geometry = _image_geometry(config)
    pixels = random_pixels(geometry, SAMPLE_IMAGES, SEED)
    height, width = geometry.image_size
    checked = f"{SAMPLE_IMAGES} random images of {height}x{width} pixels"
    if not reference:
        return smoke_report(
            "image-classification", checked, _run(session, {"pixel_values": pixels})
        )
    outputs = {o.name for o in session.get_outputs()}
    torch_model = load_reference(_vision_class(source, outputs), source)
    report = ValidationReport("image-classification", _reference_name(torch_model), checked)
    report.diffs = compare_vision(torch_model, session, pixels)
    return report


def _vision_class(source: Path, outputs: set[str]) -> str:
    """The transformers class the graph stands for: a classifier for ``logits``, the
    checkpoint's ``*WithProjection`` class for ``image_embeds``, else the bare model."""
    if "logits" in outputs:
        return "AutoModelForImageClassification"
    if "image_embeds" in outputs:
        from mobius.genai import source_json

        architectures = source_json(source, "config.json").get("architectures")
        name = architectures[0] if isinstance(architectures, list) and architectures else None
        # a name read from the checkpoint: only a transformers projection class is taken
        if isinstance(name, str) and name.endswith("WithProjection") and _in_transformers(name):
            return name
    return "AutoModel"


def _in_transformers(name: str) -> bool:
    import transformers

    return name.isidentifier() and isinstance(getattr(transformers, name, None), type)


# -- zero-shot image classification ---------------------------------------------------


def validate_zero_shot(package_dir: Path, source: Path, record: dict, reference: bool):
    """Similarity logits and both embeddings of three texts and two random images."""
    from mobius.testing import right_padded_batch
    from mobius_vision.testing._vision_parity import random_pixels
    from mobius_vision.testing._zero_shot_parity import compare_zero_shot
    from mobius_vision.vl_model import cpu_session

    config = _config(package_dir)
    text, vision = (_section(config, name) for name in ("text_config", "vision_config"))
    patch = None
    if hasattr(vision, "num_patches") and not hasattr(vision, "image_size"):  # SigLIP 2
        patch = _count(vision, "patch_size", None)  # NaFlex patches of a square grid
        side = int(round(_count(vision, "num_patches", None) ** 0.5)) * patch
        vision = SimpleNamespace(image_size=side, num_channels=getattr(vision, "num_channels", 3))
    geometry = _image_geometry(vision)
    ids, mask, _ = right_padded_batch(
        list(SAMPLE_TEXT_LENGTHS),
        _count(text, "vocab_size", None, low=2),
        0,
        SEED,
        _token(text, "eos_token_id"),
        _token(text, "pad_token_id"),
    )
    pixels = random_pixels(geometry, SAMPLE_IMAGES, SEED)
    session = cpu_session(package_dir / "model.onnx")
    height, width = geometry.image_size
    checked = (
        f"{len(SAMPLE_TEXT_LENGTHS)} texts of random tokens and {SAMPLE_IMAGES} random images "
        f"of {height}x{width} pixels"
    )
    if not reference:
        outputs = _run(session, {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels})
        return smoke_report("zero-shot-image-classification", checked, outputs)
    torch_model = load_reference("AutoModel", source)
    report = ValidationReport(
        "zero-shot-image-classification", _reference_name(torch_model), checked
    )
    report.diffs = compare_zero_shot(torch_model, session, ids, mask, pixels, patch)
    return report


def _section(config, name: str):
    section = getattr(config, name, None)
    if section is None:
        raise MobiusError(f"--validate: config.json has no {name}")
    return section


def _token(section, name: str) -> int | None:
    """A token id of a config section, or None where it has none (or not one id)."""
    value = getattr(section, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# -- vision-language ------------------------------------------------------------------


@dataclass
class VisionLanguageSample:
    """The prompt and image through a processor: what the graphs and the reference get."""

    inputs: dict[str, np.ndarray]
    maker: str  # which processor made them
    image_size: tuple[int, int]
    first_position: int = 0
    rope: tuple[np.ndarray, np.ndarray] | None = None  # M-RoPE positions and deltas

    @property
    def checked(self) -> str:
        height, width = self.image_size
        return (
            f"1 prompt with 1 random {height}x{width} image ({self.maker}) and "
            f"{SAMPLE_DECODE_STEPS} greedy decode steps"
        )


def vision_language_sample(package_dir: Path, source: Path) -> VisionLanguageSample:
    """:data:`SAMPLE_PROMPT` and one random image, through mobius's processor of the
    family, else transformers' processor of the source."""
    from mobius_vision.processing import PROCESSORS, processor_for
    from mobius_vision.testing._vl_parity import random_images

    config = _config(package_dir)
    model_type, vision = config.model_type, getattr(config, "vision_config", None)
    if isinstance(model_type, str) and model_type in PROCESSORS:
        processor = processor_for(package_dir, model_type)
        size = _image_size(processor.image.size, vision)
        text = processor.with_placeholders(SAMPLE_PROMPT, 1)
        inputs = processor(text, random_images(1, size, SEED))
        rope = processor.rope_positions(inputs)
        maker = f"mobius's {model_type} processor"
        return VisionLanguageSample(inputs, maker, size, processor.first_position, rope)
    processor = _transformers_processor(source)
    size = _image_size(getattr(getattr(processor, "image_processor", None), "size", None), vision)
    token = getattr(processor, "image_token", None)
    if not isinstance(token, str):
        raise MobiusError(f"--validate: {type(processor).__name__} names no image token")
    images = [random_images(1, size, SEED)]  # one list of images per prompt
    raw = processor(text=[f"{token}\n{SAMPLE_PROMPT}"], images=images, return_tensors="np")
    inputs = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in raw.items()}
    return VisionLanguageSample(inputs, f"transformers {type(processor).__name__}", size)


def _transformers_processor(source: Path):
    """transformers' processor of the source directory, as its own loader reads it."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(str(source), trust_remote_code=False)
    except Exception as exc:  # the loader's refusal, in one line
        raise MobiusError(
            f"--validate: no processor to make the sample image inputs: transformers' "
            f"AutoProcessor cannot load {source}: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}"
        ) from None


def _image_size(size, vision) -> tuple[int, int]:
    """The sample image's size: the processor's ``size`` setting where it gives a height
    and a width, else the vision tower's ``image_size``, else :data:`DEFAULT_IMAGE_SIZE`.

    (A ``shortest_edge`` is no side for every family: Qwen-VL's counts pixels.)
    """
    get = size.get if hasattr(size, "get") else lambda name: getattr(size, name, None)
    if get("height") is not None and get("width") is not None:
        return _side(get("height"), "size.height"), _side(get("width"), "size.width")
    if hasattr(vision, "image_size"):
        return tuple(_image_geometry(vision).image_size)
    return DEFAULT_IMAGE_SIZE


#: The submodule of the reference that runs the decode steps, for families whose forward
#: wants the images on every call but whose ``generate`` decodes with its language model.
DECODE_MODULES = {
    "blip-2": "language_model",
    "instructblip": "language_model",
    "instructblipvideo": "language_model",
    "kosmos-2": "text_model",
}


def validate_vision_language(package_dir: Path, source: Path, record: dict, reference: bool):
    """Prefill the sample prompt with its image, then greedy decode steps (either form)."""
    from mobius_vision.testing._vl_parity import compare_vision_language
    from mobius_vision.vl_model import OnnxVisionLanguage

    onnx_model = OnnxVisionLanguage(package_dir)
    sample = vision_language_sample(package_dir, source)
    if onnx_model.position_rank == 3 and sample.rope is None:
        raise MobiusError(f"--validate: {sample.maker} gives no M-RoPE positions for the sample")
    if not reference:
        outputs = _greedy_vision_language(onnx_model, sample)
        return smoke_report("vision-language", sample.checked, outputs)
    torch_model = load_reference("AutoModelForImageTextToText", source)
    rope = None if sample.rope is None else (lambda model, inputs: sample.rope)
    inner = DECODE_MODULES.get(torch_model.config.model_type)
    result = compare_vision_language(
        torch_model,
        onnx_model,
        sample.inputs,
        SAMPLE_DECODE_STEPS,
        sample.first_position,
        rope,
        decode_model=None if inner is None else (lambda model: getattr(model, inner)),
    )
    return _decode_report("vision-language", torch_model, sample.checked, result)


def _decode_report(task: str, torch_model, checked: str, result) -> ValidationReport:
    """The report of a prefill-and-decode comparison (a :class:`~mobius.testing.CausalLMParity`)."""
    report = ValidationReport(task, _reference_name(torch_model), checked)
    report.diffs = {
        "prefill logits": result.prefill_diff,
        "decode logits": max(result.decode_diffs),
    }
    report.tokens_agree = result.onnx_tokens == result.torch_tokens
    return report


def _greedy_vision_language(onnx_model, sample: VisionLanguageSample) -> dict[str, np.ndarray]:
    """The smoke run: prefill with the image, then greedy steps; every step's logits."""
    inputs = sample.inputs
    ids = inputs["input_ids"].astype(np.int64)
    text = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
    vision = {k: v for k, v in inputs.items() if k not in text}
    mask = inputs["attention_mask"].astype(np.int64)
    positions = np.arange(ids.shape[1], dtype=np.int64)[None] + sample.first_position
    rope, deltas = sample.rope if sample.rope is not None else (None, None)
    cache = onnx_model.empty_cache(len(ids))
    fed = positions if rope is None else np.asarray(rope, np.int64)
    logits, cache = onnx_model(ids, vision, mask, fed, cache, inputs.get("token_type_ids"))
    outputs = {"prefill logits": logits}
    for step in range(SAMPLE_DECODE_STEPS):
        ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        positions, mask = positions[:, -1:] + 1, np.concatenate([mask, np.ones_like(ids)], 1)
        fed = positions if deltas is None else np.stack([positions + deltas] * 3)
        logits, cache = onnx_model(ids, None, mask, fed, cache)
        outputs[f"decode {step + 1} logits"] = logits
    return outputs


# -- cross-attention vision-language (Mllama) -----------------------------------------


def validate_cross_attention_vl(package_dir: Path, source: Path, record: dict, reference: bool):
    """The vision graph's cross-attention cache once, then the prefill and greedy decode steps."""
    from mobius_vision.testing._cross_vl_parity import (
        OnnxCrossAttentionVL,
        compare_cross_attention_vl,
    )

    onnx_model = OnnxCrossAttentionVL(package_dir)
    sample = vision_language_sample(package_dir, source)
    task = "cross-attention-vision-language"
    if not reference:
        return smoke_report(task, sample.checked, _greedy_cross_attention(onnx_model, sample))
    torch_model = load_reference("AutoModelForImageTextToText", source)
    result = compare_cross_attention_vl(torch_model, onnx_model, sample.inputs, SAMPLE_DECODE_STEPS)
    return _decode_report(task, torch_model, sample.checked, result)


def _greedy_cross_attention(onnx_model, sample: VisionLanguageSample) -> dict[str, np.ndarray]:
    """The smoke run: the image's cache, the prefill, then greedy steps; every step's logits."""
    inputs = sample.inputs
    cross = onnx_model.cross_cache(inputs)
    ids = inputs["input_ids"].astype(np.int64)
    mask = inputs["attention_mask"].astype(np.int64)
    cross_mask = inputs["cross_attention_mask"].astype(np.int64)
    positions = np.arange(ids.shape[1], dtype=np.int64)[None]
    cache = onnx_model.empty_cache(len(ids))
    outputs = {}
    for step in range(SAMPLE_DECODE_STEPS + 1):
        text = dict(
            input_ids=ids, attention_mask=mask, position_ids=positions,
            cross_attention_mask=cross_mask,
        )  # fmt: skip
        logits, cache = onnx_model({**text, **cache, **cross})
        outputs["prefill logits" if step == 0 else f"decode {step} logits"] = logits
        ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        positions, mask = positions[:, -1:] + 1, np.concatenate([mask, np.ones_like(ids)], 1)
        cross_mask = cross_mask[:, -1:]  # a decode step repeats the last row, as generate does
    return outputs


# -- image-to-text (TrOCR, Donut, Pix2Struct, BLIP) -----------------------------------


#: The image-to-text sample: two random sources (pixels, or Pix2Struct's patches).
SAMPLE_SOURCES = 2


def validate_image_to_text(package_dir: Path, source: Path, record: dict, reference: bool):
    """Encode two random sources, prefill two decoder tokens, then greedy steps through both
    caches; with torch, transformers' encoder, decoder and ``generate`` on the same."""
    from mobius_vision.testing._image_to_text_parity import (
        RANDOM_SOURCES,
        OnnxImageToText,
        compare_image_to_text,
    )

    onnx_model = OnnxImageToText(package_dir)
    config = _config(package_dir)
    make_source = RANDOM_SOURCES.get(config.model_type)
    if make_source is None:
        raise MobiusError(f"--validate: no sample source for {config.model_type!r} packages")
    kind = "patches" if config.model_type == "pix2struct" else "images"
    checked = (
        f"{SAMPLE_SOURCES} random {kind}, 2 decoder tokens and {SAMPLE_DECODE_STEPS} greedy steps"
    )
    if not reference:
        sample = make_source(config, SAMPLE_SOURCES, SEED)
        hidden, cross = onnx_model.encode(sample)
        decoder_ids = np.ones((SAMPLE_SOURCES, 2), np.int64)
        cache = onnx_model.empty_cache(SAMPLE_SOURCES)
        logits, _ = onnx_model.decode(decoder_ids, sample, cross, cache)
        return smoke_report("image-to-text", checked, {"encoder": hidden, "logits": logits})
    torch_model = load_reference("AutoModelForImageTextToText", source)
    result = compare_image_to_text(
        torch_model, onnx_model, SAMPLE_SOURCES, SAMPLE_DECODE_STEPS, SEED
    )
    report = ValidationReport("image-to-text", _reference_name(torch_model), checked)
    report.diffs = {
        "encoder last_hidden_state": result.encoder_diff,
        "prefill logits": result.prefill_diff,
        "decode logits": max(result.decode_diffs),
    }
    report.tokens_agree = result.onnx_tokens == result.torch_tokens and result.generate_match
    return report


# -- audio-vision-language (the Omni thinkers, Gemma 4 unified) ------------------------

#: The audio sample's length in seconds (random noise at the processor's sampling rate).
SAMPLE_AUDIO_SECONDS = 0.6


def validate_audio_vision_language(package_dir: Path, source: Path, record: dict, reference: bool):
    """The sample prompt with one random image and one random audio clip (mobius's processor
    of the family), the prefill then greedy decode steps (either form)."""
    from mobius_vision.processing import PROCESSORS, processor_for
    from mobius_vision.testing._omni_parity import random_clips
    from mobius_vision.testing._vl_parity import compare_vision_language, random_images
    from mobius_vision.vl_model import OnnxVisionLanguage

    config = _config(package_dir)
    model_type = config.model_type
    if model_type not in PROCESSORS:
        raise MobiusError(f"--validate: mobius has no processor for {model_type!r} audio inputs")
    processor = processor_for(package_dir, model_type)
    onnx_model = OnnxVisionLanguage(package_dir)
    hears = bool(onnx_model.audio_names)  # a checkpoint without an audio tower: images alone
    size = DEFAULT_IMAGE_SIZE
    text = processor.with_placeholders(SAMPLE_PROMPT, 1)
    clips = []
    if hears:
        clips = random_clips((int(SAMPLE_AUDIO_SECONDS * processor.sampling_rate),), SEED)
        text = processor.with_audio_placeholders(text, 1)
    inputs = processor(text, random_images(1, size, SEED), clips)
    sample = VisionLanguageSample(
        inputs, f"mobius's {model_type} processor", size, processor.first_position,
        processor.rope_positions(inputs),
    )  # fmt: skip
    checked = sample.checked
    if hears:
        checked = checked.replace("image (", f"image, {SAMPLE_AUDIO_SECONDS} s of audio (")
    if not reference:
        outputs = _greedy_vision_language(onnx_model, sample)
        return smoke_report("audio-vision-language", checked, outputs)
    torch_model = _audio_reference(source, config)
    rope = None if sample.rope is None else (lambda model, inputs: sample.rope)
    result = compare_vision_language(
        torch_model,
        onnx_model,
        sample.inputs,
        SAMPLE_DECODE_STEPS,
        sample.first_position,
        rope,
        prefill_model=_reference_prefill(sample.inputs, processor),
    )
    return _decode_report("audio-vision-language", torch_model, checked, result)


def _reference_prefill(inputs: dict[str, np.ndarray], processor):
    """The kit's ``prefill_model``: the reference's prefill fed the inputs under its own
    names (``processor.reference_inputs``), with the token types where it reads them."""
    with_types = _with_token_types(inputs)

    def prefill(torch_model):
        model = torch_model if with_types is None else with_types(torch_model)

        def forward(**feeds):
            return model(**processor.reference_inputs(feeds))

        return forward

    return prefill


def _with_token_types(inputs: dict[str, np.ndarray]):
    """The kit's ``prefill_model``: the reference's prefill fed the processor's
    ``mm_token_type_ids`` where its forward reads them (Gemma 4 unified's image tokens
    attend both ways by them), else None."""
    types = inputs.get("mm_token_type_ids")
    if types is None:
        return None

    def prefill(torch_model):
        import inspect

        import torch

        if "mm_token_type_ids" not in inspect.signature(torch_model.forward).parameters:
            return torch_model

        def forward(**feeds):
            return torch_model(**feeds, mm_token_type_ids=torch.from_numpy(types))

        return forward

    return prefill


def _audio_reference(source: Path, config):
    """The source's model that turns images and audio into text: its image-text-to-text
    class (else its multimodal-LM one), or a whole Omni model's thinker alone, read from the whole checkpoint with the
    ``thinker_config`` (the whole model's loader also reads the talker's speaker pickle)."""
    thinker = getattr(config, "thinker_config", None)
    if thinker is not None:
        return load_reference("AutoModelForImageTextToText", source, config=thinker)
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if config.model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:  # Phi-4-multimodal
        return load_reference("AutoModelForMultimodalLM", source)
    return load_reference("AutoModelForImageTextToText", source)


# -- semantic segmentation -------------------------------------------------------------


def validate_semantic_segmentation(package_dir: Path, source: Path, record: dict, reference: bool):
    """The ``logits`` of two random images at the graph's size, against
    ``AutoModelForSemanticSegmentation`` (relative to the logits' scale above 1)."""
    from mobius_vision.testing._segmentation_parity import random_image_batch, scaled_difference
    from mobius_vision.vl_model import cpu_session

    session = cpu_session(package_dir / "model.onnx")
    channels, height, width = session.get_inputs()[0].shape[1:]
    pixels = random_image_batch(SAMPLE_IMAGES, channels, (height, width), SEED)
    checked = f"{SAMPLE_IMAGES} random images of {height}x{width} pixels"
    outputs = _run(session, {"pixel_values": pixels})
    if not reference:
        return smoke_report("semantic-segmentation", checked, outputs)
    import torch

    torch_model = load_reference("AutoModelForSemanticSegmentation", source)
    with torch.no_grad():
        expected = torch_model(pixel_values=torch.from_numpy(pixels)).logits.numpy()
    report = ValidationReport("semantic-segmentation", _reference_name(torch_model), checked)
    report.diffs = {"logits": scaled_difference(outputs["logits"], expected)}
    return report


# -- universal segmentation (MaskFormer, Mask2Former) -----------------------------------

#: The image size ``--validate`` feeds a universal-segmentation graph (it takes any; 64 is a
#: multiple of the backbones' stride 32).
UNIVERSAL_SEGMENTATION_IMAGE_SIZE = (64, 64)


def validate_universal_segmentation(package_dir: Path, source: Path, record: dict, reference: bool):
    """``class_queries_logits`` and ``masks_queries_logits`` of two random 64x64 images,
    against ``AutoModelForUniversalSegmentation`` (each relative to its scale above 1)."""
    from mobius_vision.tasks.universal_segmentation import UNIVERSAL_SEGMENTATION_OUTPUTS
    from mobius_vision.testing._segmentation_parity import random_image_batch, scaled_difference
    from mobius_vision.vl_model import cpu_session

    session = cpu_session(package_dir / "model.onnx")
    channels = _count(_config(package_dir), "num_channels", 3)
    size = UNIVERSAL_SEGMENTATION_IMAGE_SIZE
    pixels = random_image_batch(SAMPLE_IMAGES, channels, size, SEED)
    checked = f"{SAMPLE_IMAGES} random images of {size[0]}x{size[1]} pixels"
    feed = {"pixel_values": pixels}
    if len(session.get_inputs()) > 1:  # OneFormer: the panoptic task, the package's tokenizer
        from mobius_vision.processing._settings import load_tokenizer
        from mobius_vision.processing.universal_segmentation import task_inputs

        length = session.get_inputs()[1].shape[1]
        ids = task_inputs(load_tokenizer(package_dir), "panoptic", length)
        feed["task_inputs"] = np.repeat(ids, SAMPLE_IMAGES, axis=0)
        checked += ", the panoptic task"
    outputs = _run(session, feed)
    if not reference:
        return smoke_report("universal-segmentation", checked, outputs)
    import torch

    torch_model = load_reference("AutoModelForUniversalSegmentation", source)
    with torch.no_grad():
        expected = torch_model(**{name: torch.from_numpy(value) for name, value in feed.items()})
    report = ValidationReport("universal-segmentation", _reference_name(torch_model), checked)
    report.diffs = {
        name: scaled_difference(outputs[name], getattr(expected, name).numpy())
        for name in UNIVERSAL_SEGMENTATION_OUTPUTS
    }
    return report


# -- mask generation (Segment Anything) --------------------------------------------------


def validate_mask_generation(package_dir: Path, source: Path, record: dict, reference: bool):
    """Both graphs on two random images' pixels at the graph's size and four prompts
    (points, a point and a box each, boxes alone, a point and a mask), against
    transformers' ``AutoModel`` (``SamModel``, ``SamHQModel``, ``Sam2Model``):
    ``get_image_embeddings``, then ``forward`` given them."""
    from mobius_vision.testing._sam_parity import (
        compare_mask_generation,
        prompt_mask_size,
        sam_prompts,
    )
    from mobius_vision.vl_model import cpu_session

    encoder = cpu_session(package_dir / "image_encoder" / "model.onnx")
    decoder = cpu_session(package_dir / "prompt_decoder" / "model.onnx")
    channels, height, width = encoder.get_inputs()[0].shape[1:]
    pixels = np.random.default_rng(SEED).standard_normal((SAMPLE_IMAGES, channels, height, width))
    pixels = pixels.astype(np.float32)
    prompts = sam_prompts(height, SAMPLE_IMAGES, SEED, prompt_mask_size(decoder))
    checked = f"{SAMPLE_IMAGES} random images of {height}x{width} pixels, {len(prompts)} prompts"
    if not reference:
        image = _run(encoder, {"pixel_values": pixels})
        outputs = dict(image)
        for name, prompt in prompts.items():
            for key, value in _run(decoder, {**image, **prompt}).items():
                outputs[f"{name}/{key}"] = value
        return smoke_report("mask-generation", checked, outputs)
    torch_model = load_reference("AutoModel", source)
    report = ValidationReport("mask-generation", _reference_name(torch_model), checked)
    report.diffs = compare_mask_generation(
        torch_model, encoder, decoder, pixels, prompts, checked=False
    )
    return report


# -- depth estimation -----------------------------------------------------------------


def validate_depth_estimation(package_dir: Path, source: Path, record: dict, reference: bool):
    """``predicted_depth`` of two random images made into pixels by the package's own image
    processor (:mod:`mobius_vision.depth_runner`: sizes the family takes), and random prompt
    depths where the graph takes them, compared relative to the depth's scale above 1."""
    from mobius_vision.depth_runner import load_depth_processor
    from mobius_vision.testing._depth_parity import compare_depth
    from mobius_vision.vl_model import cpu_session

    session = cpu_session(package_dir / "model.onnx")
    processor = load_depth_processor(package_dir)
    rng = np.random.default_rng(SEED)
    images = rng.integers(0, 256, (SAMPLE_IMAGES, *DEFAULT_IMAGE_SIZE, 3), dtype=np.uint8)
    feeds = {"pixel_values": np.stack([processor(image) for image in images])}
    if "prompt_depth" in {i.name for i in session.get_inputs()}:
        feeds["prompt_depth"] = rng.uniform(0.5, 5.0, (SAMPLE_IMAGES, 1, 8, 8)).astype(np.float32)
    height, width = feeds["pixel_values"].shape[2:]
    checked = f"{SAMPLE_IMAGES} random images as {height}x{width} pixels"
    if not reference:
        return smoke_report("depth-estimation", checked, _run(session, feeds))
    torch_model = load_reference("AutoModelForDepthEstimation", source)
    report = ValidationReport("depth-estimation", _reference_name(torch_model), checked)
    report.diffs = compare_depth(torch_model, session, feeds)
    return report


#: The detection sample's image size where the config names none (DETR takes any size).
DETECTION_IMAGE_SIZE = (96, 128)


def validate_object_detection(package_dir: Path, source: Path, record: dict, reference: bool):
    """``logits`` and ``pred_boxes`` of two random images (the second padded at the bottom and
    right, its ``pixel_mask`` 0 there, where the graph takes a mask)."""
    from mobius_vision.testing._detection_parity import compare_detection, detection_inputs
    from mobius_vision.vl_model import cpu_session

    session = cpu_session(package_dir / "model.onnx")
    config = _config(package_dir)
    padded = any(i.name == "pixel_mask" for i in session.get_inputs())
    size = DETECTION_IMAGE_SIZE if padded else _image_geometry(config).image_size
    channels = _count(config, "num_channels", 3)
    feeds = detection_inputs(tuple(size), SAMPLE_IMAGES, SEED, padded, channels)
    checked = f"{SAMPLE_IMAGES} random images of {size[0]}x{size[1]} pixels"
    if not reference:
        return smoke_report("object-detection", checked, _run(session, feeds))
    torch_model = load_reference("AutoModelForObjectDetection", source)
    report = ValidationReport("object-detection", _reference_name(torch_model), checked)
    report.diffs = compare_detection(torch_model, session, feeds, min_spread=0.0)
    return report


# -- zero-shot object detection -------------------------------------------------------


def validate_zero_shot_object_detection(
    package_dir: Path, source: Path, record: dict, reference: bool
):
    """Both graphs on three random query texts and two random images at the config's image
    size, against transformers' ``AutoModelForZeroShotObjectDetection`` (OWL-ViT, OWLv2);
    a grounded package (Grounding DINO): :func:`validate_grounded_detection`."""
    from mobius_vision.grounded_detection_runner import is_grounded_package
    from mobius_vision.testing._zero_shot_detection_parity import (
        compare_zero_shot_detection,
        query_batch,
    )
    from mobius_vision.vl_model import cpu_session

    if is_grounded_package(package_dir):
        return validate_grounded_detection(package_dir, source, record, reference)
    sessions = tuple(cpu_session(package_dir / g / "model.onnx") for g in ("text", "image"))
    config = _config(package_dir)
    vocab = _count(_section(config, "text_config"), "vocab_size", None, low=3)
    input_ids, attention_mask = query_batch((6, 3, 5), vocab, SEED)
    vision = _image_geometry(_section(config, "vision_config"))
    height, width = vision.image_size
    rng = np.random.default_rng(SEED)
    pixels = rng.standard_normal((SAMPLE_IMAGES, vision.num_channels, height, width))
    pixels = pixels.astype(np.float32)
    checked = f"3 query texts, {SAMPLE_IMAGES} random images of {height}x{width} pixels"
    if not reference:
        text = _run(sessions[0], {"input_ids": input_ids, "attention_mask": attention_mask})
        outputs = {**text, **_run(sessions[1], {"pixel_values": pixels, **text})}
        return smoke_report("zero-shot-object-detection", checked, outputs)
    torch_model = load_reference("AutoModelForZeroShotObjectDetection", source)
    report = ValidationReport("zero-shot-object-detection", _reference_name(torch_model), checked)
    report.diffs = compare_zero_shot_detection(
        torch_model, sessions, input_ids, attention_mask, pixels, min_spread=0.0
    )
    return report


#: The grounded sample's image size (the second image padded at the bottom and right).
GROUNDED_IMAGE_SIZE = (96, 128)


def validate_grounded_detection(package_dir: Path, source: Path, record: dict, reference: bool):
    """Both graphs of a grounded package (Grounding DINO) on two prompts of random words and
    phrase delimiters and two random images (:mod:`~.testing._grounded_detection_parity`),
    against transformers' model run in float64, its BERT with its default (SDPA) attention,
    which masks the phrases (the eager one adds the mask)."""
    from mobius_vision.testing._grounded_detection_parity import (
        compare_grounded_detection,
        grounded_prompts,
        padded_images,
        reference_outputs,
    )
    from mobius_vision.vl_model import cpu_session

    sessions = tuple(cpu_session(package_dir / g / "model.onnx") for g in ("text", "image"))
    config = _config(package_dir)
    vocab = _count(_section(config, "text_config"), "vocab_size", None, low=1030)
    input_ids, attention_mask = grounded_prompts(vocab, SEED)
    pixels, pixel_mask = padded_images(*GROUNDED_IMAGE_SIZE, SEED)
    checked = "2 prompts, 2 random images of {}x{} pixels (the second padded)".format(
        *GROUNDED_IMAGE_SIZE
    )
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
    if not reference:
        text = _run(sessions[0], feeds)
        image_feeds = {"pixel_values": pixels, "pixel_mask": pixel_mask, **feeds, **text}
        outputs = {**text, **_run(sessions[1], image_feeds)}
        outputs["logits"] = np.nan_to_num(outputs["logits"], neginf=0.0)  # -inf past the prompt
        return smoke_report("zero-shot-object-detection", checked, outputs)
    torch_model = load_reference("AutoModelForZeroShotObjectDetection", source)
    torch_model.model.text_backbone.set_attn_implementation("sdpa")
    expected = reference_outputs(torch_model, input_ids, attention_mask, pixels, pixel_mask)
    report = ValidationReport("zero-shot-object-detection", _reference_name(torch_model), checked)
    report.diffs = compare_grounded_detection(
        sessions, input_ids, attention_mask, pixels, pixel_mask, expected, min_spread=0.0
    )
    return report


# -- text-prompted segmentation (CLIPSeg) -------------------------------------------------


def validate_text_prompted_segmentation(
    package_dir: Path, source: Path, record: dict, reference: bool
):
    """Both graphs on two random prompts and two random images at the image graph's size
    (every image with every prompt), against transformers' ``CLIPSegForImageSegmentation``."""
    from mobius_vision.testing._segmentation_parity import random_image_batch
    from mobius_vision.testing._text_prompted_segmentation_parity import (
        REFERENCE_CLASS,
        compare_text_prompted_segmentation,
    )
    from mobius_vision.testing._zero_shot_detection_parity import query_batch
    from mobius_vision.vl_model import cpu_session

    sessions = tuple(cpu_session(package_dir / g / "model.onnx") for g in ("text", "image"))
    config = _config(package_dir)
    vocab = _count(_section(config, "text_config"), "vocab_size", None, low=3)
    input_ids, attention_mask = query_batch((6, 3), vocab, SEED)
    channels, height, width = sessions[1].get_inputs()[0].shape[1:]
    pixels = random_image_batch(SAMPLE_IMAGES, channels, (height, width), SEED)
    checked = f"2 random prompts, {SAMPLE_IMAGES} random images of {height}x{width} pixels"
    if not reference:
        text = _run(sessions[0], {"input_ids": input_ids, "attention_mask": attention_mask})
        outputs = {**text, **_run(sessions[1], {"pixel_values": pixels, **text})}
        return smoke_report("text-prompted-segmentation", checked, outputs)
    torch_model = load_reference(REFERENCE_CLASS, source)
    report = ValidationReport("text-prompted-segmentation", _reference_name(torch_model), checked)
    report.diffs = compare_text_prompted_segmentation(
        torch_model, sessions, input_ids, attention_mask, pixels, min_spread=0.0
    )
    return report
