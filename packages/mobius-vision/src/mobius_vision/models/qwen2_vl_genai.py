"""Qwen2-VL and Qwen2.5-VL in onnxruntime-genai: their M-RoPE token ids and image preprocessing.

:class:`~mobius_vision.models.qwen2_vl.Qwen2VLConfig`'s generator hooks call these
(see :mod:`mobius_vision.genai`); the generator runs both families with its
``qwen2_5_vl`` class, which computes the same M-RoPE positions for images.

The generator's multimodal processor (``Model.create_multimodal_processor``) runs an
onnxruntime-extensions pipeline described by ``processor_config.json`` (the
``vision.config_filename`` of ``genai_config.json``): decode, resize, rescale,
normalise and cut the image into the vision graph's patch rows. The file is written
from the source's own ``preprocessor_config.json``, where the pipeline computes what
transformers' PIL image processor (``Qwen2VLImageProcessorPil``, both families') computes:
extensions' ``Resize`` with ``smart_resize`` is transformers' ``smart_resize``
(round to multiples of ``patch_size * merge_size`` within ``[min_pixels,
max_pixels]``), resampled with PIL's own bicubic code, and ``PatchImage`` orders
the rows as ``Qwen2VLImageProcessorPil`` does (merge blocks together).
``ConvertRGB`` is left out on purpose: in onnxruntime-genai 0.18 it swaps red and
blue after ``DecodeImage`` has already given RGB.

Other families are refused (:meth:`mobius_vision.config.VisionLanguageConfig.genai_processor_config`):
Mistral 3's Pixtral fits the longest edge and rounds *up* to a multiple of
``patch_size * spatial_merge_size``; extensions' only size-dependent resize is
Qwen's (nearest multiple, pixel-count bounds), so most image sizes would be resized
differently from transformers (33x41 becomes 32x40 there, 40x48 in transformers).
"""

from __future__ import annotations

from typing import Any

from mobius.genai import GenAIUnsupportedError

# The HF image processors whose computation the Qwen pipeline below reproduces.
_QWEN_IMAGE_PROCESSORS = frozenset(
    {"Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen2VLImageProcessorPil"}
)
_BICUBIC = 3  # PIL.Image.Resampling.BICUBIC, the one resampling verified against transformers
_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]  # Qwen2VLImageProcessor's defaults
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def _operation(name: str, kind: str, attrs: dict[str, Any] | None = None) -> dict:
    operation: dict[str, Any] = {"name": name, "type": kind}
    if attrs:
        operation["attrs"] = attrs
    return {"operation": operation}


def rope_index_token_ids(source: dict[str, Any]) -> dict[str, int]:
    """The token ids the generator's M-RoPE index looks for, from the source's ``config.json``.

    Without ``vision_start_token_id`` the generator falls back to its own default,
    finds no image start in a prompt of another vocabulary and numbers the image
    tokens as text: the positions, and so the logits, differ from transformers'.
    """
    ids = {name: source.get(name) for name in ("vision_start_token_id", "video_token_id")}
    missing = sorted(name for name, value in ids.items() if value is None)
    if missing:
        raise GenAIUnsupportedError(f"config.json has no {', '.join(missing)}")
    return ids


def processor_config(config, hf: dict[str, Any]) -> dict:
    """The ``processor_config.json`` content for a split Qwen2-VL or Qwen2.5-VL package.

    ``hf`` is the source's ``preprocessor_config.json`` (empty when it has none); its
    patch geometry must be the built vision graph's (``config.vision``). Raises
    :class:`~mobius.genai.GenAIUnsupportedError` when the generator's preprocessing
    would not equal transformers' (then the package still runs text prompts in the
    generator).
    """
    if not hf:
        raise GenAIUnsupportedError("the source has no preprocessor_config.json")
    kind = hf.get("image_processor_type")
    if kind not in _QWEN_IMAGE_PROCESSORS:
        raise GenAIUnsupportedError(f"image_processor_type {kind!r} is not Qwen2VLImageProcessor")
    for flag in ("do_resize", "do_rescale", "do_normalize"):
        if hf.get(flag, True) is not True:
            raise GenAIUnsupportedError(f"preprocessor_config.json sets {flag} false")
    if hf.get("resample", _BICUBIC) != _BICUBIC:
        raise GenAIUnsupportedError(
            f"resample {hf['resample']} (only bicubic, 3, is matched by the generator's resize)"
        )
    vision = config.vision
    geometry = {
        "patch_size": (hf.get("patch_size", 14), vision.patch_size),
        "merge_size": (hf.get("merge_size", 2), vision.spatial_merge_size),
        "temporal_patch_size": (hf.get("temporal_patch_size", 2), vision.temporal_patch_size),
    }
    for name, (processor, graph) in geometry.items():
        if processor != graph:
            raise GenAIUnsupportedError(
                f"preprocessor_config.json has {name} {processor}; the vision graph's is {graph}"
            )
    # transformers: min_pixels / max_pixels (older files) override size's edges
    size = hf.get("size") or {}
    min_pixels = hf.get("min_pixels") or size.get("shortest_edge", 56 * 56)
    max_pixels = hf.get("max_pixels") or size.get("longest_edge", 28 * 28 * 1280)
    patch, merge, temporal = (geometry[n][1] for n in geometry)
    transforms = [
        _operation("decode_image", "DecodeImage", {"color_space": "RGB"}),
        _operation(
            "resize",
            "Resize",
            {
                "interpolation": "CUBIC",
                "smart_resize": 1,
                "min_pixels": min_pixels,
                "max_pixels": max_pixels,
                "patch_size": patch,
                "merge_size": merge,
            },
        ),
        _operation("rescale", "Rescale", {"rescale_factor": hf.get("rescale_factor", 1 / 255)}),
        _operation(
            "normalize",
            "Normalize",
            {
                "mean": list(hf.get("image_mean", _CLIP_MEAN)),
                "std": list(hf.get("image_std", _CLIP_STD)),
            },
        ),
        _operation(
            "patch_image",
            "PatchImage",
            {"patch_size": patch, "temporal_patch_size": temporal, "merge_size": merge},
        ),
    ]
    return {"processor": {"name": "qwen2_5_image_processor", "transforms": transforms}}
