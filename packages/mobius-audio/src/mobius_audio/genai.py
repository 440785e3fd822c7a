"""onnxruntime-genai for speech-to-text packages: the ``genai_config.json`` of a Whisper build.

The generator's Whisper class runs the two graphs of
:class:`~mobius_audio.tasks.SpeechToTextTask` as they are: ``genai_config.json``
names their inputs and outputs (``encoder.inputs.audio_features`` is
``input_features``, the cross-attention cache ``present.%d.encoder.key`` on the
encoder's side and ``past_key_values.%d.encoder.key`` on the decoder's), so no graph
is renamed. The caller feeds the log-mel features itself, as transformers'
``WhisperFeatureExtractor`` makes them, under the name ``input_features``, and the
decoder prompt (start, language, task, no-timestamps tokens) with ``append_tokens``.

What the generator does not do, so the build does not claim it:

- No ``audio_processor_config.json`` is written. The generator's log-mel pipeline
  (onnxruntime-extensions' ``STFTNorm`` + ``LogMelSpectrum``) takes the STFT of the
  clip alone and pads the log-mel frames to 30 s afterwards, where transformers pads
  the waveform with zeros first, and it pads the first STFT window otherwise than
  transformers' reflection: the first two frames, and the frames where a clip
  shorter than 30 s ends, differ from transformers' features.
- Whisper's ``suppress_tokens`` / ``begin_suppress_tokens`` are not applied (the
  generator has no such search option): its greedy tokens are the decoder's argmax,
  which transformers' ``generate`` gives only where no suppressed token wins.
"""

from __future__ import annotations

from mobius.genai import (
    GenAIUnsupportedError,
    companion_json,
    search_config,
    session_options,
    token_ids,
)

# Speech model types the generator 0.18 has a class for (mobius model_type -> its type).
# Not here: moonshine (the generator's Moonshine class, "streaming_enc_dec_asr", runs
# Moonshine *streaming*'s separate frontend, encoder, adapter, cross_kv and decoder_kv
# graphs, not one encoder and one decoder taking encoder_attention_mask) and
# speech_to_text (no class; its decoder also takes encoder_attention_mask, which the
# Whisper class does not feed).
GENAI_SPEECH_TYPES = {"whisper": "whisper"}

# The generator's Whisper class insists on 30 s of features ("Whisper uses num_frames =
# 3000"): it sizes the encoder's output and the cross cache for 1500 positions.
WHISPER_FRAMES = 3000

ENCODER, DECODER = "encoder/model", "decoder/model"


def speech_to_text_genai_config(package, *, ep: str = "cpu") -> dict:
    """The ``genai_config.json`` content for a built speech-to-text ``package`` (module docstring).

    ``ep`` picks the generator's execution provider (``"cuda"`` asks for CUDA,
    anything else runs on CPU). Raises :class:`~mobius.genai.GenAIUnsupportedError`
    for a package the generator cannot run: a family it has no class for, a window
    other than 30 s, or graphs whose inputs and outputs it cannot name.
    """
    config = package.config
    genai_type = GENAI_SPEECH_TYPES.get(config.model_type)
    if genai_type is None:
        raise GenAIUnsupportedError(
            f"onnxruntime-genai has no speech-to-text class for {config.model_type!r} "
            f"(it has: {', '.join(sorted(GENAI_SPEECH_TYPES))})"
        )
    if set(package.models) != {ENCODER, DECODER}:
        raise GenAIUnsupportedError(f"expected the graphs {ENCODER} and {DECODER}")
    frames = 2 * config.max_source_positions  # the stride-2 front end halves the frames
    if frames != WHISPER_FRAMES:
        raise GenAIUnsupportedError(
            f"onnxruntime-genai's Whisper takes {WHISPER_FRAMES} feature frames (30 s); "
            f"this model's window is {frames} frames"
        )
    layers, heads, head_size = _decoder_cache(package.models[DECODER])
    _check_encoder(package.models[ENCODER], layers)

    source = companion_json(package, "config.json")
    generation = companion_json(package, "generation_config.json")
    context_length = config.max_target_positions
    return {
        "model": {
            **token_ids(config, generation, source),
            "context_length": context_length,
            "decoder": {
                "session_options": session_options(ep),
                "filename": f"{DECODER}.onnx",
                "head_size": head_size,
                "hidden_size": config.hidden_size,
                "inputs": {
                    "input_ids": "input_ids",
                    "past_key_names": "past_key_values.%d.decoder.key",
                    "past_value_names": "past_key_values.%d.decoder.value",
                    "cross_past_key_names": "past_key_values.%d.encoder.key",
                    "cross_past_value_names": "past_key_values.%d.encoder.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.decoder.key",
                    "present_value_names": "present.%d.decoder.value",
                },
                "num_attention_heads": heads,
                "num_hidden_layers": layers,
                "num_key_value_heads": heads,
            },
            "encoder": {
                "session_options": session_options(ep),
                "filename": f"{ENCODER}.onnx",
                "head_size": config.hidden_size // config.encoder_heads,
                "hidden_size": config.hidden_size,
                "inputs": {"audio_features": "input_features"},
                "outputs": {
                    "encoder_hidden_states": "last_hidden_state",
                    "cross_present_key_names": "present.%d.encoder.key",
                    "cross_present_value_names": "present.%d.encoder.value",
                },
                "num_attention_heads": config.encoder_heads,
                "num_hidden_layers": config.encoder_layers,
                "num_key_value_heads": config.encoder_heads,
            },
            "type": genai_type,
            "vocab_size": config.vocab_size,
        },
        # The decoder's attention reads past and present at their true lengths (no
        # in-place GroupQueryAttention), so the generator keeps them apart.
        "search": search_config(generation, max_length=context_length, share_buffer=False),
    }


def _names(values) -> set[str]:
    return {value.name for value in values}


def _cache(prefix: str, layers: int, side: str) -> set[str]:
    """``{prefix}.{i}.{side}.key`` / ``.value`` for every layer."""
    return {f"{prefix}.{i}.{side}.{kind}" for i in range(layers) for kind in ("key", "value")}


def _decoder_cache(decoder) -> tuple[int, int, int]:
    """(layers, heads, head_size) of the decoder, whose I/O must be what the generator feeds and reads."""
    inputs = _names(decoder.graph.inputs)
    layers = sum(1 for name in inputs if name.endswith(".decoder.key"))
    expected = {"input_ids"} | _cache("past_key_values", layers, "decoder")
    expected |= _cache("past_key_values", layers, "encoder")
    if inputs != expected:
        raise GenAIUnsupportedError(
            "the decoder's inputs are not the generator's Whisper inputs "
            f"(it does not feed {sorted(inputs - expected)}, misses {sorted(expected - inputs)})"
        )
    missing = {"logits"} | _cache("present", layers, "decoder")
    missing -= _names(decoder.graph.outputs)
    if missing:
        raise GenAIUnsupportedError(f"the decoder lacks the outputs {sorted(missing)}")
    first = next(v for v in decoder.graph.inputs if v.name == "past_key_values.0.decoder.key")
    dims = [getattr(d, "value", d) for d in first.shape]
    if len(dims) != 4 or not all(isinstance(dims[i], int) for i in (1, 3)):
        raise GenAIUnsupportedError(f"the decoder's cache has the shape {dims}")
    return layers, dims[1], dims[3]


def _check_encoder(encoder, layers: int) -> None:
    """The encoder takes only ``input_features`` and gives every decoder layer's cross cache."""
    inputs = _names(encoder.graph.inputs)
    if inputs != {"input_features"}:
        raise GenAIUnsupportedError(
            f"the encoder takes {sorted(inputs)}; the generator's Whisper feeds only input_features"
        )
    missing = {"last_hidden_state"} | _cache("present", layers, "encoder")
    missing -= _names(encoder.graph.outputs)
    if missing:
        raise GenAIUnsupportedError(f"the encoder lacks the outputs {sorted(missing)}")
