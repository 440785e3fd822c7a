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

SEGMENT_HELP = (
    "A semantic-segmentation package (SegFormer, UperNet, BEiT, DPT) makes the pixels as its\n"
    "preprocessor_config.json says, upsamples its logits bilinearly to each image's size\n"
    "and takes the likeliest class of every pixel, as transformers' image-segmentation\n"
    "pipeline does: the class map goes to a PNG (palette mode, pixel value = class id) and\n"
    "one line per image lists the classes present with their share of the pixels,\n"
    "largest first (mobius-vision)."
)


SAM_SEGMENT_HELP = (
    "A Segment Anything package (SAM: image_encoder/ and prompt_decoder/) segments what the\n"
    "prompt shows: --point X,Y (repeatable; --background-point for what to leave out)\n"
    "and/or --box X0,Y0,X1,Y1, in pixels of the image. The pixels and coordinates are\n"
    "made as transformers' SamProcessor makes them and the masks post-processed as its\n"
    "post_process_masks does; the mask with the best predicted IoU goes to the PNG (255\n"
    "inside) and one line per image lists every mask's IoU score (and SAM 2's object score\n"
    "logit: above 0, the object is in the image). --refine N runs the mask decoder N more\n"
    "times, each with the last run's best low-resolution mask as a mask prompt, as SAM's\n"
    "predictor examples refine a mask (mobius-vision)."
)
UNIVERSAL_SEGMENT_HELP = (
    "A universal-segmentation package (MaskFormer, Mask2Former, OneFormer) scores a class\n"
    "and a mask per query; each pixel takes the class whose query probabilities times mask\n"
    "probabilities sum highest, upsampled to the image, as transformers'\n"
    "post_process_semantic_segmentation does. The class map is written as a PNG (pixel\n"
    "value = class id) and the classes present are printed with their share of the\n"
    "pixels. A OneFormer package is told its --task: semantic (the class map), instance\n"
    "or panoptic (the default), post-processed as OneFormer's image processor does with\n"
    "the pipeline's thresholds: the PNG holds each pixel's segment id (0: none) and the\n"
    "line lists id:label score per segment (mobius-vision)."
)

TEXT_PROMPTED_SEGMENT_HELP = (
    "A text-prompted segmentation package (CLIPSeg) segments what each of --labels names:\n"
    "its text graph embeds the labels once (padded together, as CLIPSegProcessor), its image\n"
    "graph scores the image against each. The pixels are made as the package's image\n"
    "processor makes them; each label's probability (the sigmoid of its logits) is resized\n"
    "bilinearly to the image, as CLIPSeg's users do (transformers has no pipeline for it).\n"
    "Writes one PNG per image and label, <output stem>.<label>.png: the probability as 8-bit\n"
    "grey (255 = 1.0), or with --threshold a binary mask (255 above it); one line per image\n"
    "gives each label's share of pixels above the threshold (default 0.5) (mobius-vision)."
)
_TEXT_PROMPTED = "mobius_vision.text_prompted_segmentation_runner"
#: mobius segment's options for text-prompted packages: (dest, flags, argparse keywords).
TEXT_PROMPTED_SEGMENT_OPTIONS = (
    (
        "labels",
        ("--labels",),
        dict(
            default=None,
            metavar="TEXTS",
            help="what to segment, comma-separated: one mask PNG each. Example: mobius segment "
            'clipseg-out/ kitchen.jpg --labels "a cat,a remote"',
        ),
    ),
    (
        "mask_threshold",
        ("--threshold",),
        dict(
            type=float,
            default=None,
            metavar="P",
            help="write binary masks, 255 where the probability is above P in [0, 1] (default: "
            "the probability map itself, as grey)",
        ),
    ),
)

#: ``mobius segment``'s prompt options: dest, flag, metavar, help.
SAM_PROMPT_OPTIONS = (
    (
        "points",
        "--point",
        "X,Y",
        "a point on the object, in pixels of the image (repeat it for several)",
    ),
    (
        "background_points",
        "--background-point",
        "X,Y",
        "a point off the object (repeatable)",
    ),
    (
        "box",
        "--box",
        "X0,Y0,X1,Y1",
        "a box around the object, top-left then bottom-right",
    ),
)

DETECT_HELP = (
    "An object-detection package (DETR, Conditional DETR, DAB-DETR, Table Transformer,\n"
    "YOLOS...) finds boxes in each image: its preprocessor_config.json makes the pixels (and\n"
    "pixel_mask) as transformers' image processor does, and the boxes are post-processed as\n"
    "its post_process_object_detection does (DETR: softmax without the no-object class;\n"
    "Conditional DETR: a sigmoid per class, top 100). One line per box: IMAGE: label score\n"
    "x0 y0 x1 y1 (corners in the image's pixels), in the order transformers' pipeline lists\n"
    "them (mobius-vision)."
)
ZERO_SHOT_DETECT_HELP = (
    "A zero-shot object-detection package (OWL-ViT, OWLv2) finds the objects --labels names:\n"
    "its text graph embeds the labels once (the package's tokenizer), its image graph scores\n"
    "each patch of an image against them. Pixels as transformers' OwlViT/Owlv2 image\n"
    "processor makes them; boxes as its zero-shot-object-detection pipeline lists them: each\n"
    "label scored alone (a sigmoid), every box above --threshold (the pipeline's default is\n"
    "0.1), best first. One line per box: IMAGE: label score x0 y0 x1 y1 (mobius-vision).\n"
    'A Grounding DINO package reads the labels as one prompt ("a cat. a remote.") and keeps\n'
    "the boxes as GroundingDinoProcessor's post_process_grounded_object_detection does: a box\n"
    "whose best token scores above --threshold, labelled by the prompt's tokens scoring above\n"
    "--text-threshold."
)
_ZERO_SHOT_DETECTOR = "mobius_vision.zero_shot_detection_runner"
#: mobius detect's options: (dest, flags, argparse keywords).
DETECT_OPTIONS = (
    (
        "threshold",
        ("--threshold",),
        dict(
            type=float,
            default=0.5,
            metavar="SCORE",
            help="keep the boxes scoring above SCORE, in [0, 1] (default 0.5, as transformers' "
            "pipeline)",
        ),
    ),
    (
        "boxes_png",  # "output" is the package directory's dest
        ("--output",),
        dict(
            default=None,
            metavar="PNG",
            help="draw the boxes on the image and save it as PNG (one IMAGE only). Example: "
            "mobius detect detr-out/ street.jpg --output street-boxes.png",
        ),
    ),
)

DEPTH_HELP = (
    "A depth-estimation package (Depth Anything, DPT...) estimates each image's depth as\n"
    "transformers' depth-estimation pipeline does: the package's preprocessor_config.json\n"
    "makes the pixels, the depth is resized back to the image's size (bicubic). Writes a\n"
    "16-bit grey PNG, the depth stretched from its min (0) to its max (65535): brighter is\n"
    "a larger model output (Depth Anything's relative depth is inverse: brighter is nearer),\n"
    "and prints each map's min and max; --raw keeps the float values. A Prompt Depth\n"
    "Anything package also takes the image's low-resolution depth (--prompt-depth) and\n"
    "returns metric depth. Depth Pro's inverse depth becomes depth as its processor makes it\n"
    "(bilinear, 1 / inverse), metric where the package has the field-of-view head: the line\n"
    "then also gives the field of view and the focal length it implies. ZoeDepth's metric\n"
    "depth (metres) comes back with the reflect padding its processor adds cropped off\n"
    "(mobius-vision)."
)

#: mobius-vision's own commands: name, the line of ``mobius --help``, the paragraph of
#: ``mobius NAME --help``.
DENSE_COMMANDS = (
    (
        "detect",
        "find objects in images with a built object-detection package",
        "Run the object-detection package in OUTPUT_DIR on each IMAGE with ONNX Runtime:\n"
        "print one line per box found (label, score, corners in pixels) and draw them.",
    ),
    (
        "segment",
        "segment images with a built segmentation or Segment Anything package",
        "Run the segmentation package in OUTPUT_DIR on each IMAGE with ONNX Runtime and\n"
        "write its mask as a PNG.",
    ),
    (
        "depth",
        "estimate depth maps with a built depth-estimation package",
        "Run the depth-estimation package in OUTPUT_DIR on each IMAGE with ONNX Runtime and\n"
        "write its depth map as a PNG.",
    ),
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
    from mobius.plugins import CliOption, CommandInfo, RunnerInfo, SourceInfo, TaskInfo
    from mobius_vision.config import VISION_HEADS, VISION_LANGUAGE_FORMS

    # The dense-prediction commands; their runners and options are registered below.
    for name, help_line, description in DENSE_COMMANDS:
        registry.register_command(
            CommandInfo(
                name,
                help_line,
                description,
                PACKAGE,
                inputs_metavar="IMAGE",
                inputs_help="the images (PNG, JPEG...)",
            )
        )

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
    # Images and audio into one decoder (the Omni thinkers, Gemma 4, Gemma 4 unified).
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
    # Class scores and boxes per image (DETR and its family): mobius detect's packages.
    # A depth map per image (Depth Anything, DPT, GLPN): mobius depth's packages.
    registry.register_task(
        TaskInfo(
            "depth-estimation",
            f"{_TASKS}.depth_estimation:DepthEstimationTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_depth_estimation",
        )
    )
    registry.register_task(
        TaskInfo(
            "object-detection",
            f"{_TASKS}.object_detection:ObjectDetectionTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_object_detection",
        )
    )
    # Boxes found by free-text queries (OWL-ViT, OWLv2): text/ and image/ graphs.
    registry.register_task(
        TaskInfo(
            "zero-shot-object-detection",
            f"{_TASKS}.zero_shot_detection:ZeroShotObjectDetectionTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_zero_shot_object_detection",
        )
    )
    # A class score per position of a coarse grid (SegFormer, UperNet): mobius segment's packages.
    registry.register_task(
        TaskInfo(
            "semantic-segmentation",
            f"{_TASKS}.semantic_segmentation:SemanticSegmentationTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_semantic_segmentation",
        )
    )
    # A class and a mask per learned query (MaskFormer): mobius segment's packages.
    registry.register_task(
        TaskInfo(
            "universal-segmentation",
            f"{_TASKS}.universal_segmentation:UniversalSegmentationTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_universal_segmentation",
        )
    )
    # A mask per text prompt (CLIPSeg): text/ and image/ graphs.
    registry.register_task(
        TaskInfo(
            "text-prompted-segmentation",
            f"{_TASKS}.text_prompted_segmentation:TextPromptedSegmentationTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_text_prompted_segmentation",
        )
    )
    # A VL decoder's token states over a prompt with images (Qwen-Image Edit's text encoder).
    registry.register_task(
        TaskInfo("image-text-encoder", f"{_TASKS}.image_text_encoder:ImageTextEncoderTask", PACKAGE)
    )
    # Promptable masks (Segment Anything): image_encoder/ and prompt_decoder/ graphs.
    registry.register_task(
        TaskInfo(
            "mask-generation",
            f"{_TASKS}.mask_generation:MaskGenerationTask",
            PACKAGE,
            validate="mobius_vision.validate:validate_mask_generation",
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
    # mobius depth: depth-estimation packages (mobius_vision.depth_runner)
    registry.register_runner(
        RunnerInfo(
            "depth-estimation",
            accepts="mobius_vision.depth_runner:is_depth_package",
            run="mobius_vision.depth_runner:run_cli",
            package=PACKAGE,
            help=DEPTH_HELP,
            examples=(
                "mobius depth depth-anything-out/ room.jpg --output room-depth.png --raw room.npy",
                "mobius depth dpt-out/ a.png b.png",
                "mobius depth depth-pro-out/ street.jpg  # prints the field of view too",
                "mobius depth zoedepth-nyu-kitti-out/ room.jpg --raw room.npy  # metres",
            ),
            command="depth",
            options=("depth_png", "depth_raw", "depth_prompt"),
        )
    )
    for dest, flag, metavar, text in (
        (
            "depth_png",
            "--output",
            "PNG",
            "where the depth PNG of the (one) image goes; default <image stem>-depth.png here",
        ),
        ("depth_raw", "--raw", "NPY", "also save the float32 depth map [height, width] there"),
        (
            "depth_prompt",
            "--prompt-depth",
            "FILE",
            "Prompt Depth Anything: the image's low-resolution depth (a 16-bit PNG in "
            "millimetres, as its processor's prompt_scale_to_meter reads it, or a 2-D .npy)",
        ),
    ):
        registry.register_option(
            CliOption(
                command="depth",
                dest=dest,
                flags=(flag,),
                kwargs=dict(default=None, metavar=metavar, help=text),
                package=PACKAGE,
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
    # mobius segment: semantic-segmentation packages (mobius_vision.segmentation_runner).
    registry.register_runner(
        RunnerInfo(
            "semantic-segmentation",
            accepts="mobius_vision.segmentation_runner:is_semantic_segmentation_package",
            run="mobius_vision.segmentation_runner:run_cli",
            package=PACKAGE,
            help=SEGMENT_HELP,
            examples=(
                "mobius segment segformer-out/ street.png --output street-mask.png",
                "mobius segment upernet-out/ a.jpg b.jpg --output masks/",
            ),
            command="segment",
            options=("mask_output",),
        )
    )
    registry.register_option(
        CliOption(
            command="segment",
            dest="mask_output",  # "output" is the package directory's dest
            flags=("--output",),
            kwargs=dict(
                default=None,
                metavar="PATH",
                help="where the mask PNG goes: a file for one image, a folder (one <stem>.png "
                "each) for several; default <stem>.segment.png in the current folder",
            ),
            package=PACKAGE,
        )
    )
    # mobius segment: universal-segmentation packages (MaskFormer; universal_segmentation_runner).
    registry.register_runner(
        RunnerInfo(
            "universal-segmentation",
            accepts="mobius_vision.universal_segmentation_runner:is_universal_segmentation_package",
            run="mobius_vision.universal_segmentation_runner:run_cli",
            package=PACKAGE,
            help=UNIVERSAL_SEGMENT_HELP,
            examples=(
                "mobius segment maskformer-out/ street.png --output street-mask.png",
                "mobius segment oneformer-out/ street.png --task semantic",
            ),
            command="segment",
            options=("mask_output", "segment_task"),
        )
    )
    registry.register_option(
        CliOption(
            command="segment",
            dest="segment_task",  # "task" is mobius build's
            flags=("--task",),
            kwargs=dict(
                default=None,
                choices=("semantic", "instance", "panoptic"),
                help="what a package that takes a task (OneFormer) segments: semantic (a class "
                "per pixel), instance or panoptic (segments; the default). Example: mobius "
                "segment oneformer-out/ street.png --task instance",
            ),
            group="universal-segmentation packages",
            package=PACKAGE,
        )
    )
    # mobius segment: Segment Anything packages, prompted (mobius_vision.sam_runner).
    registry.register_runner(
        RunnerInfo(
            "mask-generation",
            accepts="mobius_vision.sam_runner:is_mask_generation_package",
            run="mobius_vision.sam_runner:run_cli",
            package=PACKAGE,
            help=SAM_SEGMENT_HELP,
            examples=(
                "mobius segment sam-out/ truck.jpg --point 500,375 --output truck-mask.png",
                "mobius segment sam-out/ truck.jpg --box 75,275,1725,850 --point 575,750",
                "mobius segment sam-out/ truck.jpg --point 500,375 --refine 1",
            ),
            command="segment",
            options=("mask_output", "points", "background_points", "box", "refine"),
        )
    )
    for dest, flag, metavar, help_text in SAM_PROMPT_OPTIONS:
        registry.register_option(
            CliOption(
                command="segment",
                dest=dest,
                flags=(flag,),
                kwargs=dict(
                    action="store" if dest == "box" else "append",
                    default=None,
                    metavar=metavar,
                    help=help_text,
                ),
                group="Segment Anything packages",
                package=PACKAGE,
            )
        )
    registry.register_option(
        CliOption(
            command="segment",
            dest="refine",
            flags=("--refine",),
            kwargs=dict(
                type=int,
                default=0,
                metavar="N",
                help="run the mask decoder N more times, each with the last run's best mask "
                "as a mask prompt (default 0)",
            ),
            group="Segment Anything packages",
            package=PACKAGE,
        )
    )
    # mobius segment --labels: text-prompted segmenters (CLIPSeg; text_prompted_segmentation_runner).
    registry.register_runner(
        RunnerInfo(
            "text-prompted-segmentation",
            accepts=f"{_TEXT_PROMPTED}:is_text_prompted_segmentation_package",
            run=f"{_TEXT_PROMPTED}:run_cli",
            package=PACKAGE,
            help=TEXT_PROMPTED_SEGMENT_HELP,
            examples=(
                'mobius segment clipseg-out/ kitchen.jpg --labels "a cat,a remote"',
                'mobius segment clipseg-out/ kitchen.jpg --labels "a mug" --threshold 0.4 '
                "--output mug.png",
            ),
            command="segment",
            options=("mask_output", "labels", "mask_threshold"),
        )
    )
    for dest, flags, kwargs in TEXT_PROMPTED_SEGMENT_OPTIONS:
        registry.register_option(
            CliOption(
                command="segment",
                dest=dest,
                flags=flags,
                kwargs=kwargs,
                group="text-prompted packages (CLIPSeg)",
                package=PACKAGE,
            )
        )
    # mobius detect: object detectors (DETR and its family, mobius_vision.detection_runner).
    registry.register_runner(
        RunnerInfo(
            "object-detection",
            accepts="mobius_vision.detection_runner:is_detection_package",
            run="mobius_vision.detection_runner:run_cli",
            package=PACKAGE,
            help=DETECT_HELP,
            examples=(
                "mobius detect detr-out/ street.jpg",
                "mobius detect detr-out/ street.jpg --threshold 0.9 --output street-boxes.png",
            ),
            command="detect",
            options=("threshold", "boxes_png"),
        )
    )
    for dest, flags, kwargs in DETECT_OPTIONS:
        registry.register_option(
            CliOption(command="detect", dest=dest, flags=flags, kwargs=kwargs, package=PACKAGE)
        )
    # mobius detect --labels: zero-shot detectors (OWL-ViT, OWLv2; zero_shot_detection_runner).
    registry.register_runner(
        RunnerInfo(
            "zero-shot-object-detection",
            accepts=f"{_ZERO_SHOT_DETECTOR}:is_zero_shot_detection_package",
            run=f"{_ZERO_SHOT_DETECTOR}:run_cli",
            package=PACKAGE,
            help=ZERO_SHOT_DETECT_HELP,
            examples=(
                'mobius detect owlvit-out/ street.jpg --labels "a cat,a remote" --threshold 0.1',
                'mobius detect owlv2-out/ street.jpg --labels "a bus" --output street-boxes.png',
                'mobius detect grounding-dino-out/ street.jpg --labels "a cat,a remote" '
                "--threshold 0.35 --text-threshold 0.25",
            ),
            command="detect",
            options=("threshold", "boxes_png", "labels", "text_threshold"),
        )
    )
    registry.register_option(
        CliOption(
            command="detect",
            dest="labels",
            flags=("--labels",),
            kwargs=dict(
                default=None,
                metavar="TEXTS",
                help="what to look for, comma-separated (zero-shot packages: OWL-ViT, OWLv2, "
                'Grounding DINO). Example: mobius detect owlvit-out/ street.jpg --labels "a cat,a '
                'remote"',
            ),
            group="zero-shot packages",
            package=PACKAGE,
        )
    )
    registry.register_option(
        CliOption(
            command="detect",
            dest="text_threshold",
            flags=("--text-threshold",),
            kwargs=dict(
                type=float,
                default=None,
                metavar="SCORE",
                help="Grounding DINO: a box's label is the prompt's tokens scoring above SCORE "
                "(default 0.25, as its processor). Example: mobius detect grounding-dino-out/ "
                'street.jpg --labels "a cat,a remote" --text-threshold 0.3',
            ),
            group="Grounding DINO packages",
            package=PACKAGE,
        )
    )
