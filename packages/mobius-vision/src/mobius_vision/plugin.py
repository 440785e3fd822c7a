"""mobius-vision's slice beyond its model types: tasks, source recognisers, CLI options, runners.

Registered lazily (``"module:attribute"`` strings): registering imports nothing
but :mod:`mobius_vision.config`'s constants.
"""

from __future__ import annotations

PACKAGE = "mobius-vision"

#: The values of ``mobius build --part`` (:mod:`mobius_vision.text_part`).
PARTS = ("all", "text")

_TASKS = "mobius_vision.tasks"
#: The tasks whose builds take --form and --part.
VISION_LANGUAGE_TASKS = (
    "vision-language",
    "audio-vision-language",
    "cross-attention-vision-language",
)
#: Each task's ``mobius build --validate`` check (:mod:`mobius_vision.validate`).
_VALIDATORS = {
    "image-classification": "validate_image_classification",
    "zero-shot-image-classification": "validate_zero_shot",
    "vision-language": "validate_vision_language",
    "cross-attention-vision-language": "validate_cross_attention_vl",
}

RUNNER_HELP = (
    "A vision-language package (LLaVA, Gemma 3, PaliGemma, InternVL...: split or single\n"
    "form) takes --image FILE, once per image, and runs the family's own image processing\n"
    "without torch (resize, rescale, normalise, tiles). With a chat template the prompt\n"
    "becomes a user message of the images then the text; without one (or with\n"
    "--no-chat-template) the prompt is used as is and must hold one placeholder per image\n"
    "(<image>...), or holds none and gets them in front (mobius-vision)."
)
RUNNER_EXAMPLES = (
    'mobius generate llava-out/ "What is in this picture?" --image cat.png',
    'mobius generate llava-out/ "USER: <image> and <image>: what differs? ASSISTANT:" '
    "--no-chat-template --image a.png --image b.png",
)

IMAGE_TO_TEXT_HELP = (
    "An image-to-text package (TrOCR, Donut, Pix2Struct: an encoder–decoder) reads one\n"
    "--image and prints its text; the decoder starts from decoder_start_token_id, then the\n"
    "PROMPT's tokens (\"\" for none; Donut's task prompt is the start itself), and decodes\n"
    "greedily unless sampling is asked (mobius-vision)."
)
CLASSIFY_HELP = (
    "An image classifier (ViT, ConvNeXt...: built with its image-classification head)\n"
    "scores each image file over config.json's labels; a zero-shot package (CLIP,\n"
    'SigLIP) over the --labels given, as "This is a photo of {label}.". The package\'s\n'
    "preprocessor_config.json makes the pixels as transformers' image processors do;\n"
    "scores are those of transformers' pipelines (CLIP: softmax over the labels;\n"
    "SigLIP: a sigmoid each). One line per image: label score pairs, best first,\n"
    "separated by ';' (mobius-vision)."
)


def register_slice(registry) -> None:
    """Register what mobius-vision owns besides its model types (safe to call twice).

    Its tasks (``image-classification`` with its ``--head`` values, zero-shot image
    classification, the two vision–language contracts and ``image-to-text``), the
    ``--form`` and ``--part`` build options (``--part text``: a wrapper's text decoder
    alone, with its source recogniser, :mod:`mobius_vision.text_part`), the ``mobius
    generate`` runners for vision–language packages with their ``--image`` option
    (:mod:`mobius_vision.runner`) and image-to-text packages
    (:mod:`mobius_vision.image_to_text_runner`), and the ``mobius classify`` runner of
    image classifiers and zero-shot packages (:mod:`mobius_vision.classifier`).
    """
    from mobius.plugins import CliOption, RunnerInfo, SourceInfo, TaskInfo
    from mobius_vision.config import VISION_HEADS, VISION_LANGUAGE_FORMS

    for name, target, heads in (
        ("image-classification", "image_classification:ImageClassificationTask", VISION_HEADS),
        ("zero-shot-image-classification", "zero_shot:ZeroShotImageClassificationTask", ()),
        ("vision-language", "vision_language:VisionLanguageTask", ()),
        (
            "cross-attention-vision-language",
            "cross_attention_vl:CrossAttentionVisionLanguageTask",
            (),
        ),
    ):
        validate = f"mobius_vision.validate:{_VALIDATORS[name]}"
        registry.register_task(
            TaskInfo(name, f"{_TASKS}.{target}", PACKAGE, heads, validate=validate)
        )
    # Images and audio into one decoder (the Omni thinkers, Gemma 4 unified).
    registry.register_task(
        TaskInfo(
            "audio-vision-language",
            f"{_TASKS}.audio_vision_language:AudioVisionLanguageTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_audio_vision_language",
        )
    )
    # An encoder–decoder over an image (TrOCR, Pix2Struct, BLIP): core's seq2seq contract.
    registry.register_task(
        TaskInfo(
            "image-to-text",
            f"{_TASKS}.image_to_text:ImageToTextTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_image_to_text",
        )
    )
    registry.register_option(
        CliOption(
            command="build",
            dest="form",
            flags=("--form",),
            kwargs=dict(
                choices=list(VISION_LANGUAGE_FORMS),
                default="split",
                help="vision-language models only: 'split' (default) writes vision/, embedding/ "
                "and decoder/ graphs, the layout runtimes load; 'single' one model.onnx that "
                "takes pixel_values beside the causal-LM inputs",
            ),
            tasks=VISION_LANGUAGE_TASKS,
            package=PACKAGE,
        )
    )
    registry.register_option(
        CliOption(
            command="build",
            dest="part",
            flags=("--part",),
            kwargs=dict(
                choices=list(PARTS),
                default="all",
                help="multimodal wrapper checkpoints (a config.json with text_config): 'all' "
                "(default) builds the model whole; 'text' builds its text decoder alone, an "
                "ordinary causal-LM package, leaving the vision and audio towers out on purpose "
                "(one note lists them). Example: mobius build --model google/gemma-3-4b-it "
                "gemma3-text/ --part text",
            ),
            tasks=VISION_LANGUAGE_TASKS,
            package=PACKAGE,
        )
    )
    # Asked before core's reader: --part text, and wrapper types no package builds whole.
    registry.register_source(
        SourceInfo(
            "multimodal-wrapper-text-part",
            "mobius_vision.text_part:recognise",
            PACKAGE,
            help="a multimodal wrapper checkpoint with --part text: its text decoder alone",
            describe="mobius_vision.text_part:describe",
        )
    )
    registry.register_option(
        CliOption(
            command="generate",
            dest="audios",
            flags=("--audio",),
            kwargs=dict(
                action="append",
                default=None,
                metavar="FILE",
                help="an audio clip for a package that hears too (Qwen2.5-Omni, Qwen3-Omni: WAV, "
                "FLAC, OGG, MP3); repeat it for several, in the order of the prompt's audio "
                "placeholders. "
                'Example: mobius generate omni-out/ "What do you hear?" --audio clip.wav',
            ),
            group="vision-language packages",
            package=PACKAGE,
        )
    )
    registry.register_option(
        CliOption(
            command="generate",
            dest="images",
            flags=("--image",),
            kwargs=dict(
                action="append",
                default=None,
                metavar="FILE",
                help="an image for a vision-language package (PNG, JPEG...); repeat it for "
                "several, in the order of the prompt's placeholders",
            ),
            group="vision-language packages",
            package=PACKAGE,
        )
    )
    # An encoder–decoder over images (TrOCR, Pix2Struct): encoder/ and decoder/, which
    # core's seq2seq runner would otherwise take for a text source.
    registry.register_runner(
        RunnerInfo(
            "image-to-text",
            accepts="mobius_vision.image_to_text_runner:is_image_to_text_package",
            run="mobius_vision.image_to_text_runner:run_cli",
            package=PACKAGE,
            help=IMAGE_TO_TEXT_HELP,
            examples=(
                'mobius generate trocr-out/ "" --image line.png',
                'mobius generate donut-out/ "<s_cord-v2>" --image receipt.png',
                'mobius generate pix2struct-out/ "" --image photo.png',
            ),
        )
    )
    # Asked first: a cross-attention package (Mllama) has vision/ too, but no embedding/.
    registry.register_runner(
        RunnerInfo(
            "cross-attention-vision-language",
            accepts="mobius_vision.processing.cross_attention_runner:is_cross_attention_package",
            run="mobius_vision.processing.cross_attention_runner:run_cli",
            package=PACKAGE,
        )
    )
    registry.register_runner(
        RunnerInfo(
            "vision-language",
            accepts="mobius_vision.runner:is_vision_language_package",
            run="mobius_vision.runner:run_cli",
            package=PACKAGE,
            help=RUNNER_HELP,
            examples=RUNNER_EXAMPLES,
        )
    )
    # mobius classify: image classifiers and zero-shot dual encoders (mobius_vision.classifier)
    registry.register_runner(
        RunnerInfo(
            "image-classifier",
            accepts="mobius_vision.classifier:is_image_package",
            run="mobius_vision.classifier:run_cli",
            package=PACKAGE,
            help=CLASSIFY_HELP,
            examples=(
                "mobius classify vit-out/ cat.png dog.jpg --top 3",
                'mobius classify clip-out/ cat.png --labels "cat,dog,a red car"',
            ),
            command="classify",
        )
    )
