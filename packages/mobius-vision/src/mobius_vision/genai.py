"""onnxruntime-genai for vision–language packages: ``genai_config.json`` of a split build.

A vision–language package qualifies in its split form, for the families the
generator runs (:data:`GENAI_VISION_LANGUAGE_TYPES`; :data:`GENAI_UNRUNNABLE` says why
others it has a class for are refused): the decoder takes
``inputs_embeds`` (core's :func:`mobius.genai.decoder_genai_config` describes it),
and ``embedding`` and ``vision`` sections name the other two graphs. A package with an
``audio/`` graph too (the audio–vision–language contract) gets a ``speech`` section,
for the generator classes that run one (:data:`GENAI_SPEECH_TYPES`). Each section maps
the generator's input names to the graph's (:data:`GENAI_VISION_INPUTS`,
:data:`GENAI_SPEECH_INPUTS`). A family adds what only its generator class reads
(:meth:`~mobius_vision.config.VisionLanguageConfig.genai_model_fields`).

Where the generator's image preprocessing can equal transformers' (the family's
:meth:`~mobius_vision.config.VisionLanguageConfig.genai_processor_config`), its
``processor_config.json`` is added to ``package.text_files`` (so it is saved with the
package), and for a package with audio its ``audio_processor_config.json``
(:meth:`~mobius_vision.config.VisionLanguageConfig.genai_audio_processor_config`);
otherwise the reason is logged and the package runs text prompts only. Both read the
source's processor settings: ``preprocessor_config.json``, and what transformers 5 nests
in ``processor_config.json`` (``image_processor``, ``feature_extractor``).
"""

from __future__ import annotations

import json
import logging

from mobius.genai import GenAIUnsupportedError, decoder_genai_config, source_json

PROCESSOR_FILENAME = "processor_config.json"
AUDIO_PROCESSOR_FILENAME = "audio_processor_config.json"  # the generator's default name

# The generator's (0.18) vision–language class for each family it runs, by mobius model_type.
# Qwen2-VL runs as qwen2_5_vl: that class's M-RoPE positions for images are Qwen2-VL's too
# (the two differ only for video), and the three graphs take the same inputs. Qwen's
# position_ids are M-RoPE's [3, batch, sequence], which the generator computes.
GENAI_VISION_LANGUAGE_TYPES = {
    "mistral3": "mistral3",
    "phi4_multimodal": "phi4mm",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen2_vl": "qwen2_5_vl",
    "qwen3_5": "qwen3_5",
    "qwen3_5_moe": "qwen3_5_moe",
}

# The generator's classes that run an audio graph (its config's "speech" section).
GENAI_SPEECH_TYPES = frozenset({"phi4mm"})

# The generator's name (a key of a section's "inputs") for each graph input it feeds.
# A vision graph input is named as the generator does, or with an "image_" prefix.
GENAI_VISION_INPUTS = frozenset({"pixel_values", "image_sizes", "image_grid_thw", "attention_mask"})
GENAI_SPEECH_INPUTS = {  # the audio–vision–language contract's names -> the generator's
    "input_features": "audio_embeds",
    "feature_attention_mask": "attention_mask",
    "input_features_mask": "attention_mask",
    "audio_sizes": "audio_sizes",  # the generator counts the audio tokens from it
    "audio_projection_mode": "audio_projection_mode",
}

# Families the generator has a class for (gemma3, qwen3_vl) but cannot run as mobius builds
# them, and why; the build's note says it. The generator refuses any I/O name its config
# sections do not list ("Unknown value" when genai_config.json is read).
GENAI_UNRUNNABLE = {
    "gemma3": (
        "its decoder takes token_type_ids (bidirectional attention over each image), which "
        "the generator does not feed: decoder.inputs has no such entry and the first step "
        "fails with 'Missing Input: token_type_ids' (0.18 refuses the name in decoder.inputs "
        "and embedding.outputs: 'Unknown value \"token_type_ids\"')"
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
    split = {"vision/model", "embedding/model", "decoder/model"}
    if not split <= set(package.models) <= split | {"audio/model"}:
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
    vision = {
        "filename": "vision/model.onnx",
        "inputs": _vision_inputs(package.models["vision/model"]),
        "outputs": {"image_features": "image_features"},
    }
    for name in ("patch_size", "spatial_merge_size"):
        value = getattr(config.vision, name, None) or getattr(config, name, None)
        if value is not None:
            vision[name] = value
    embedding_inputs = {"input_ids": "input_ids", "image_features": "image_features"}
    sections = {"vision": vision}
    if "audio/model" in package.models:
        sections["speech"] = _speech_section(package.models["audio/model"], genai_type)
        embedding_inputs["audio_features"] = "audio_features"
    elif genai_type in GENAI_SPEECH_TYPES:
        # 0.18 otherwise looks for a speech graph ("speech.config_filename is set but
        # speech.filename is missing"): no audio feature extraction is configured.
        sections["speech"] = {"config_filename": ""}
    result["model"].update(
        image_token_id=config.image_token_id,
        **config.genai_model_fields(source_json(package.source_dir, "config.json")),
        vocab_size=config.text.vocab_size,
        embedding={
            "filename": "embedding/model.onnx",
            "inputs": embedding_inputs,
            "outputs": {"inputs_embeds": "inputs_embeds"},
        },
        **sections,
    )
    _add_processor_configs(package, with_audio="audio/model" in package.models)
    return result


def _vision_inputs(vision_graph) -> dict[str, str]:
    """The vision section's ``inputs``: the generator's name of each graph input -> the input."""
    inputs = {}
    for value in vision_graph.graph.inputs:
        name = value.name
        key = name if name in GENAI_VISION_INPUTS else name.removeprefix("image_")
        if key not in GENAI_VISION_INPUTS:
            raise GenAIUnsupportedError(
                f"the vision graph takes {name!r}, which onnxruntime-genai does not feed"
            )
        inputs[key] = name
    return inputs


def _speech_section(audio_graph, genai_type: str) -> dict:
    """The ``speech`` section naming the ``audio/`` graph's inputs (:data:`GENAI_SPEECH_INPUTS`)."""
    if genai_type not in GENAI_SPEECH_TYPES:
        raise GenAIUnsupportedError(f"onnxruntime-genai's {genai_type!r} class runs no audio graph")
    names = [value.name for value in audio_graph.graph.inputs]
    unfed = [name for name in names if name not in GENAI_SPEECH_INPUTS]
    if unfed or "audio_sizes" not in names:
        raise GenAIUnsupportedError(
            f"the audio graph takes {names}; onnxruntime-genai feeds "
            f"{sorted(set(GENAI_SPEECH_INPUTS))} and needs audio_sizes"
        )
    return {
        "filename": "audio/model.onnx",
        "config_filename": AUDIO_PROCESSOR_FILENAME,
        "inputs": {GENAI_SPEECH_INPUTS[name]: name for name in names},
        "outputs": {"audio_features": "audio_features"},
    }


def processor_settings(source_dir) -> dict:
    """The source's processor settings: ``preprocessor_config.json``, updated by what
    transformers 5 nests in ``processor_config.json`` (``image_processor``,
    ``feature_extractor``); ``{}`` when there are none."""
    settings = dict(source_json(source_dir, "preprocessor_config.json"))
    nested = source_json(source_dir, "processor_config.json")
    for part in ("image_processor", "feature_extractor"):
        if isinstance(nested.get(part), dict):
            settings.update(nested[part])
    return settings


def _add_processor_configs(package, *, with_audio: bool) -> None:
    """The generator's processor files into ``package.text_files``, or why not (logged)."""
    settings = processor_settings(package.source_dir)
    config = package.config
    files = [(PROCESSOR_FILENAME, config.genai_processor_config)]
    if with_audio:
        files.append((AUDIO_PROCESSOR_FILENAME, config.genai_audio_processor_config))
    for filename, make in files:
        try:
            content = make(settings)
        except GenAIUnsupportedError as exc:
            logging.getLogger("mobius").warning("no %s (text prompts only): %s", filename, exc)
            continue
        package.text_files[filename] = json.dumps(content, indent=4) + "\n"
