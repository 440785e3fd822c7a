"""onnxruntime-genai for vision–language packages: ``genai_config.json`` of a split build.

A vision–language package qualifies in its split form, for the families the
generator runs (:data:`GENAI_VISION_LANGUAGE_TYPES`; :data:`GENAI_UNRUNNABLE` says why
others it has a class for are refused): the decoder takes
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

# The generator's (0.18) vision–language class for each family it runs, by mobius model_type.
# Qwen2-VL runs as qwen2_5_vl: that class's M-RoPE positions for images are Qwen2-VL's too
# (the two differ only for video), and the three graphs take the same inputs. Qwen's
# position_ids are M-RoPE's [3, batch, sequence], which the generator computes.
GENAI_VISION_LANGUAGE_TYPES = {
    "mistral3": "mistral3",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen2_vl": "qwen2_5_vl",
    "qwen3_5": "qwen3_5",
    "qwen3_5_moe": "qwen3_5_moe",
}

# Families the generator has a class for (gemma3, qwen3_vl) but cannot run as mobius builds
# them, and why; the build's note says it. The generator refuses any I/O name its config
# sections do not list ("Unknown value" when genai_config.json is read).
GENAI_UNRUNNABLE = {
    "gemma3": (
        "its decoder takes token_type_ids (bidirectional attention over each image), which "
        "the generator does not feed: decoder.inputs has no such entry and the first step "
        "fails with 'Missing Input: token_type_ids'"
    ),
    "gemma4": (
        "its sliding and full attention layers cache different head sizes (and kv heads), and "
        "the generator (0.18) sizes every layer's present key/value buffer from the one "
        "head_size of its config: the first layer of the other size fails in its attention "
        "node (a hand-written config, tried with both attention back ends)"
    ),
    "lfm2_vl": (
        "its SigLIP 2 tower takes NaFlex patches with spatial_shapes and pixel_attention_mask, "
        "names the generator's vision.inputs entries do not take ('Unknown value "
        '"spatial_shapes"\' when the config is read)'
    ),
    "qwen3_vl": (
        "its DeepStack features pass from the vision graph to the embedding graph "
        "(deepstack_features) and on to the decoder (deepstack_embeds), names the generator's "
        "vision.outputs, embedding.inputs/outputs and decoder.inputs entries do not take; "
        "without them the embedding graph fails with 'Missing Input: deepstack_features'"
    ),
}
GENAI_UNRUNNABLE["qwen3_vl_moe"] = GENAI_UNRUNNABLE["qwen3_vl"]


def vision_language_genai_config(package, *, ep: str = "cpu") -> dict:
    """The ``genai_config.json`` content for a built vision–language ``package`` (module docstring).

    ``ep`` picks the generator's execution provider (``"cuda"`` asks for CUDA,
    anything else runs on CPU). Raises :class:`~mobius.genai.GenAIUnsupportedError`
    for a package the generator cannot run: the single form, a family it has no
    class for, or one whose graphs it cannot feed (:data:`GENAI_UNRUNNABLE`).
    """
    config = package.config
    if set(package.models) != {"vision/model", "embedding/model", "decoder/model"}:
        raise GenAIUnsupportedError(
            "onnxruntime-genai loads vision–language models in the split form (--form split)"
        )
    if config.model_type in GENAI_UNRUNNABLE:
        raise GenAIUnsupportedError(
            f"onnxruntime-genai cannot run {config.model_type!r} packages: "
            f"{GENAI_UNRUNNABLE[config.model_type]}"
        )
    genai_type = GENAI_VISION_LANGUAGE_TYPES.get(config.model_type)
    if genai_type is None:
        raise GenAIUnsupportedError(
            f"onnxruntime-genai has no vision–language class for {config.model_type!r} "
            f"(it runs: {', '.join(sorted(GENAI_VISION_LANGUAGE_TYPES))})"
        )
    decoder = package.models["decoder/model"]
    result = decoder_genai_config(
        package, decoder, config.text, "decoder/model.onnx", "inputs_embeds", genai_type, ep
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
