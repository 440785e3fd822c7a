"""Vision–language with audio inputs too: an ``audio/`` graph beside ``vision/``.

The vision–language contract (:mod:`.vision_language`) with one more encoder.
``--form split`` writes four graphs:

- ``vision/model.onnx``: as the vision–language contract (``pixel_values``... ->
  ``image_features``);
- ``audio/model.onnx``: ``input_features`` float [num_audios, mel_bins, frames] (the
  log-mel features of each clip, padded on the right) and ``feature_attention_mask``
  int64 [num_audios, frames] (1 for a real frame) -> ``audio_features``
  [num_audio_tokens, hidden], every clip's tokens in order, already projected to the
  text decoder's width. Families whose transformers processor names the mask
  ``input_features_mask`` (the Gemmas') take it under that name, and may lay out
  ``input_features`` as their processor does (Gemma 4 unified: raw waveform frames
  [num_audios, frames, samples_per_frame]). A family's audio graph may also take
  ``audio_sizes`` int64 [num_audios] (the tokens each clip keeps) and
  ``audio_projection_mode`` int64 [1] (which of its projections: 1 when the prompt
  has images, else 0), as its processor gives them;
- ``embedding/model.onnx``: ``input_ids``, ``image_features`` and ``audio_features`` ->
  ``inputs_embeds``, the image placeholders replaced by the image features and the
  audio placeholders by the audio features, each in order (feed either with no rows
  when the ids hold none of its placeholders);
- ``decoder/model.onnx``: as the vision–language contract.

``--form single`` writes one ``model.onnx`` that takes the vision and the audio inputs
beside the causal-LM ones; a prompt without images, or without audio, and every decode
step pass them with no rows (an ``If`` skips each tower then).

The module gives what a vision–language module gives, and ``audio_inputs(dtype)``,
``audio_modules()``, ``audio_features(op, input_features, feature_attention_mask)``
and ``audio_outputs()``; its ``embed`` takes ``(op, input_ids, *image_outputs,
audio_features)``.

A checkpoint of the family without an audio tower (Gemma 4's larger models have no
``audio_config``) gives no ``audio_modules()``: the package then holds no ``audio/``
graph, the single graph takes no audio inputs, and ``embed`` gets no
``audio_features``; the runner refuses audio for such a package in one line.
"""

from __future__ import annotations

import logging

from mobius_vision.tasks.vision_language import EncoderGraph, VisionLanguageTask

logger = logging.getLogger("mobius")

#: The audio graph's inputs, fixed by the contract (the runner feeds them by name): the
#: features and their mask, and what a family may take beside them (module docstring).
AUDIO_INPUTS = (
    "input_features",
    "feature_attention_mask",
    "input_features_mask",
    "audio_sizes",
    "audio_projection_mode",
)


class AudioVisionLanguageTask(VisionLanguageTask):
    """Image and audio features merged into a text decoder's embeddings (module docstring)."""

    name = "audio-vision-language"
    # genai_config: the vision–language task's (mobius_vision.genai adds the audio graph).

    def configure(self, config, options, source):
        """As the vision–language task; a config that leaves parts of the checkpoint out
        (``left_out``: a whole Qwen2.5-Omni's talker) says so in a note."""
        config = super().configure(config, options, source)
        left_out = getattr(config, "left_out", None)
        if left_out:
            logger.warning("%s: %s", config.model_type, left_out)
        return config

    def encoders(self, module) -> list[EncoderGraph]:
        """The vision graph, then the audio graph where the module has an audio tower."""
        if not module.audio_modules():
            return super().encoders(module)
        audio = EncoderGraph(
            "audio",
            module.audio_inputs,
            module.audio_modules,
            module.audio_features,
            module.audio_outputs,
        )
        return [*super().encoders(module), audio]
