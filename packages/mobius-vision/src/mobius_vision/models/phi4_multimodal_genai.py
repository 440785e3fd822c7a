"""Phi-4-multimodal in onnxruntime-genai: the files its ``phi4mm`` processor reads.

:class:`~mobius_vision.models.phi4_multimodal.Phi4MultimodalConfig`'s generator hooks
call these (see :mod:`mobius_vision.genai`). The generator's multimodal processor
(``Model.create_multimodal_processor``) runs two onnxruntime-extensions pipelines:

- ``processor_config.json`` (images): decode, ``Phi4VisionDynamicPreprocess`` (the HD
  canvas of at most ``dynamic_hd`` crops and its patch mask), rescale, normalise,
  ``Phi4VisionProcessor`` (the global view, the crops, the image token count);
- ``audio_processor_config.json`` (audio): decode and resample to 16 kHz, then
  ``Phi4AudioEmbed`` (the log-mel features, their frame mask, the tokens per clip).

Both are written from the source's processor settings, checked first. The extensions'
ops hard-code the real model's geometry: 14-pixel patches (the mask's side is the crop
over 14) and a 16x16 pooled global view (256 tokens in the image token count), so only
a 448-pixel crop in 14-pixel patches is described; a smaller tower is refused.

Where the generator's preprocessing differs from transformers' (measured in
``tests/test_genai_phi4mm.py``): an image whose canvas needs no resampling (one crop,
448 pixels on one side) gives transformers' pixels exactly; an enlarged canvas
differs by one uint8 level in places (PIL's bilinear against torchvision's); a canvas
of several crops gets a different global view (PIL's antialiased bicubic, cubic
coefficient -0.5, against PyTorch's ``interpolate``, -0.75, no antialias). Its log-mel
features come from another float32 STFT than transformers' (PyTorch's): on log-mels of
9 to 25 they differ by 1e-3 typically, 0.03 at most (in low-energy bins); and a batch
of clips is padded with other values than transformers' zeros.
"""

from __future__ import annotations

from typing import Any

from mobius.genai import GenAIUnsupportedError

#: What onnxruntime-extensions' Phi4 image ops assume (module docstring).
GENAI_CROP, GENAI_PATCH = 448, 14
_IMAGE_PROCESSORS = frozenset({"Phi4MultimodalImageProcessor", "Phi4MultimodalImageProcessorFast"})
_FEATURE_EXTRACTORS = frozenset({"Phi4MultimodalFeatureExtractor"})
#: Phi4MultimodalFeatureExtractor's STFT; extensions' Phi4AudioEmbed pre-emphasises by 0.97
#: and strides one frame per feature, as these defaults do.
_AUDIO_DEFAULTS = {
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 512,
    "win_length": 400,
    "preemphasis": 0.97,
    "audio_feat_stride": 1,
    "audio_downsample_rate": 1,  # parsed by Phi4AudioEmbed (qformer_compression_rate), not applied
}


def _operation(name: str, kind: str, attrs: dict[str, Any] | None = None, **more) -> dict:
    operation: dict[str, Any] = {"name": name, "type": kind, **more}
    if attrs:
        operation["attrs"] = attrs
    return {"operation": operation}


def _positive_int(settings: dict[str, Any], name: str, default: int, limit: int = 1 << 16) -> int:
    value = settings.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
        raise GenAIUnsupportedError(
            f"the processor settings' {name} {value!r} is not an int in 1..{limit}"
        )
    return value


def _three_floats(settings: dict[str, Any], name: str, *, positive: bool) -> list[float]:
    value = settings.get(name, [0.5, 0.5, 0.5])
    ok = isinstance(value, list) and len(value) == 3
    ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not ok or (positive and min(value) <= 0):
        raise GenAIUnsupportedError(f"the processor settings' {name} {value!r} is not 3 numbers")
    return [float(v) for v in value]


def _check_kind(settings: dict[str, Any], key: str, known: frozenset[str]) -> None:
    kind = settings.get(key)
    if kind is not None and kind not in known:
        raise GenAIUnsupportedError(f"{key} {kind!r} is not one of {sorted(known)}")


def processor_config(config, settings: dict[str, Any]) -> dict:
    """The generator's ``processor_config.json`` (images) for a split Phi-4-multimodal package.

    ``settings`` are the source's image-processor settings (empty when it has none).
    Raises :class:`~mobius.genai.GenAIUnsupportedError` for a tower of other geometry
    than extensions' ops assume, or settings they cannot express.
    """
    if not settings:
        raise GenAIUnsupportedError("the source has no image processor settings")
    _check_kind(settings, "image_processor_type", _IMAGE_PROCESSORS)
    graph = (config.crop_size, config.vision.patch_size)
    if graph != (GENAI_CROP, GENAI_PATCH):
        raise GenAIUnsupportedError(
            f"the tower takes {graph[0]}-pixel crops in {graph[1]}-pixel patches; "
            f"onnxruntime-extensions' Phi4 image ops assume {GENAI_CROP} in {GENAI_PATCH}"
        )
    size = settings.get("size", {"height": GENAI_CROP, "width": GENAI_CROP})
    patch = settings.get("patch_size", GENAI_PATCH)
    if size != {"height": GENAI_CROP, "width": GENAI_CROP} or patch != GENAI_PATCH:
        raise GenAIUnsupportedError(
            f"the image processor's size {size!r} and patch_size {patch!r} are not the tower's"
        )
    for flag in ("do_resize", "do_rescale", "do_normalize"):
        if settings.get(flag, True) is not True:
            raise GenAIUnsupportedError(f"the image processor sets {flag} to {settings[flag]!r}")
    rescale = settings.get("rescale_factor", 1 / 255)
    if isinstance(rescale, bool) or not isinstance(rescale, (int, float)) or rescale <= 0:
        raise GenAIUnsupportedError(f"the image processor's rescale_factor {rescale!r}")
    hd = {"dynamic_hd": _positive_int(settings, "dynamic_hd", 36, limit=1024)}
    transforms = [
        _operation("decode_image", "DecodeImage", {"color_space": "RGB"}),
        _operation(
            "phi4_vision_dynamic_preprocess",
            "Phi4VisionDynamicPreprocess",
            {**hd, "dyhd_base_resolution": GENAI_CROP},
        ),
        _operation("rescale", "Rescale", {"rescale_factor": float(rescale)}, inputs=[":0"]),
        _operation(
            "normalize",
            "Normalize",
            {
                "mean": _three_floats(settings, "image_mean", positive=False),
                "std": _three_floats(settings, "image_std", positive=True),
            },
        ),
        _operation(
            "phi4_vision_processor",
            "Phi4VisionProcessor",
            {"dyhd_base_resolution": GENAI_CROP, "interpolation": "CUBIC"},
            inputs=[":0", "phi4_vision_dynamic_preprocess:1"],
        ),
    ]
    # The aligner stacks the images and gives the patch mask as numbers: without it the
    # generator reinterprets the mask's int64 bytes as the graph's float type.
    processor = {
        "name": "phi_4_vision_processor",
        "transforms": transforms,
        "output_aligner": "phi4-vision-aligner",
    }
    return {"processor": processor}


def audio_processor_config(config, settings: dict[str, Any]) -> dict:
    """The generator's ``audio_processor_config.json`` for a Phi-4-multimodal package with audio.

    ``settings`` are the source's feature-extractor settings (transformers' defaults where
    a key is absent). Raises :class:`~mobius.genai.GenAIUnsupportedError` for settings
    extensions' ``Phi4AudioEmbed`` does not compute.
    """
    _check_kind(settings, "feature_extractor_type", _FEATURE_EXTRACTORS)
    for name, fixed in _AUDIO_DEFAULTS.items():
        if settings.get(name, fixed) != fixed:
            raise GenAIUnsupportedError(
                f"the feature extractor's {name} {settings[name]!r}: onnxruntime-extensions' "
                f"Phi4AudioEmbed computes {name} {fixed}"
            )
    mels = _positive_int(settings, "feature_size", 80, limit=1024)
    if mels != config.audio.input_size:
        raise GenAIUnsupportedError(
            f"the feature extractor gives {mels} mel bins; the audio graph takes "
            f"{config.audio.input_size}"
        )
    compression = _positive_int(settings, "audio_compression_rate", 8)
    stft = {"n_fft": 512, "frame_length": 400, "hop_length": 160, "win_fn": "hamming"}
    logmel = {"chunk_size": 30, "hop_length": 160, "n_fft": 512, "n_mel": mels}
    attrs = {
        "audio_compression_rate": compression,
        **{f"stft_normal/{k}": v for k, v in stft.items()},
        # frames first ([frames, mel]) and no padding to a 30 s chunk, as transformers
        **{f"logmel/{k}": v for k, v in logmel.items()},
        "logmel/feature_first": 0,
        "logmel/no_padding": 1,
    }
    sequence = [
        _operation("audio_decoder", "AudioDecoderEx", {"target_sample_rates": [16000]}),
        _operation("phi_4_audio_embed", "Phi4AudioEmbed", attrs),
    ]
    return {"feature_extraction": {"sequence": sequence, "output_aligner": "phi4-audio-aligner"}}
