"""mobius-vision's slice beyond its model types: tasks, source recognisers, CLI options, runners.

Registered lazily (``"module:attribute"`` strings): registering imports nothing
but :mod:`mobius_vision.config`'s constants.
"""

from __future__ import annotations

PACKAGE = "mobius-vision"

_TASKS = "mobius_vision.tasks"


def register_slice(registry) -> None:
    """Register what mobius-vision owns besides its model types (safe to call twice).

    Its tasks (``image-classification`` with its ``--head`` values, zero-shot image
    classification and the two vision–language contracts), the ``--form`` build option and
    the ``mobius generate`` answer for vision–language packages (:mod:`mobius_vision.runner`).
    """
    from mobius.plugins import CliOption, RunnerInfo, TaskInfo
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
        registry.register_task(TaskInfo(name, f"{_TASKS}.{target}", PACKAGE, heads))
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
            tasks=("vision-language", "cross-attention-vision-language"),
            package=PACKAGE,
        )
    )
    registry.register_runner(
        RunnerInfo(
            "vision-language",
            accepts="mobius_vision.runner:is_vision_language_package",
            run="mobius_vision.runner:run_cli",
            package=PACKAGE,
        )
    )
