"""onnxruntime-genai for vision–language packages: ``genai_config.json`` of a split build.

A vision–language package qualifies in its split form, for the families the
generator has a class for (:data:`GENAI_VISION_LANGUAGE_TYPES`): the decoder takes
``inputs_embeds`` (core's :func:`mobius.genai.decoder_genai_config` describes it),
and ``embedding`` and ``vision`` sections name the other two graphs. A family adds
what only its generator class reads (:meth:`~mobius_vision.config.VisionLanguageConfig.genai_model_fields`).

Where the generator's image preprocessing can equal transformers' (the family's
:meth:`~mobius_vision.config.VisionLanguageConfig.genai_processor_config`), its
``processor_config.json`` is added to ``package.text_files`` (so it is saved with the
package); otherwise the reason is logged and the package runs text prompts only.
"""

from __future__ import annotations

import json
import logging

from mobius.genai import GenAIUnsupportedError, decoder_genai_config, source_json

PROCESSOR_FILENAME = "processor_config.json"

# Vision–language model types the generator has a class for, whose decoders take only the
# causal-LM inputs (Gemma 3's also takes token_type_ids, which the generator 0.18 does not feed:
# the first step fails with "Missing Input: token_type_ids", and decoder.inputs refuses the name);
# Qwen2.5-VL's position_ids are M-RoPE's [3, batch, sequence], which the generator computes.
GENAI_VISION_LANGUAGE_TYPES = frozenset({"mistral3", "qwen2_5_vl"})


def vision_language_genai_config(package, *, ep: str = "cpu") -> dict:
    """The ``genai_config.json`` content for a built vision–language ``package`` (module docstring).

    ``ep`` picks the generator's execution provider (``"cuda"`` asks for CUDA,
    anything else runs on CPU). Raises :class:`~mobius.genai.GenAIUnsupportedError`
    for a package the generator cannot run: the single form, or a family it has no
    class for.
    """
    config = package.config
    if set(package.models) != {"vision/model", "embedding/model", "decoder/model"}:
        raise GenAIUnsupportedError(
            "onnxruntime-genai loads vision–language models in the split form (--form split)"
        )
    if config.model_type not in GENAI_VISION_LANGUAGE_TYPES:
        raise GenAIUnsupportedError(
            f"onnxruntime-genai has no vision–language class for {config.model_type!r} "
            f"(it has: {', '.join(sorted(GENAI_VISION_LANGUAGE_TYPES))})"
        )
    decoder = package.models["decoder/model"]
    result = decoder_genai_config(
        package, decoder, config.text, "decoder/model.onnx", "inputs_embeds", config.model_type, ep
    )
    vision_inputs = [value.name for value in package.models["vision/model"].graph.inputs]
    vision = {
        "filename": "vision/model.onnx",
        "inputs": {name: name for name in vision_inputs},
        "outputs": {"image_features": "image_features"},
    }
    for name in ("patch_size", "spatial_merge_size"):
        value = getattr(config.vision, name, None) or getattr(config, name, None)
        if value is not None:
            vision[name] = value
    result["model"].update(
        image_token_id=config.image_token_id,
        **config.genai_model_fields(source_json(package.source_dir, "config.json")),
        vocab_size=config.text.vocab_size,
        embedding={
            "filename": "embedding/model.onnx",
            "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
            "outputs": {"inputs_embeds": "inputs_embeds"},
        },
        vision=vision,
    )
    _add_processor_config(package)
    return result


def _add_processor_config(package) -> None:
    """The generator's ``processor_config.json`` into ``package.text_files``, or why not (logged)."""
    preprocessor = source_json(package.source_dir, "preprocessor_config.json")
    try:
        processor = package.config.genai_processor_config(preprocessor)
    except GenAIUnsupportedError as exc:
        logging.getLogger("mobius").warning(
            "no %s (text prompts only): %s", PROCESSOR_FILENAME, exc
        )
        return
    package.text_files[PROCESSOR_FILENAME] = json.dumps(processor, indent=4) + "\n"
