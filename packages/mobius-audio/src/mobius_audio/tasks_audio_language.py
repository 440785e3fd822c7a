"""The audio–language contract: audio clips feeding a causal text decoder (speech LLMs).

Core's multimodal-decoder contract (:class:`mobius.tasks.MultimodalDecoderTask`) with
one encoder, the audio tower (Qwen2-Audio, Voxtral). A build writes the split form,
three graphs (the single form is not offered: mobius-audio registers no ``--form``):

- ``audio/model.onnx``: ``input_features`` float [num_audios, mel_bins, frames] (each
  clip's Whisper log-mel features, padded on the right to the extractor's window) and
  ``feature_attention_mask`` int64 [num_audios, frames] (1 for a frame of real samples)
  -> ``audio_features`` float [num_audio_tokens, hidden]: every clip's tokens in order,
  already projected to the text decoder's width. These are the names of mobius-vision's
  audio graph (the Omni thinkers), so one runner feeds either. A family without a
  feature mask takes ``input_features`` alone (Voxtral: whole 30 s chunks, ``frames``
  fixed at ``2 * max_source_positions``);
- ``embedding/model.onnx``: ``input_ids`` int64 [batch, sequence] and ``audio_features``
  -> ``inputs_embeds`` float [batch, sequence, hidden], the token embeddings with the
  audio placeholders (the config's ``audio_token_id``) replaced by the features in order
  (row-major, batch then position); feed ``audio_features`` with no rows when the ids
  hold no placeholder (a decode step, a text-only prompt);
- ``decoder/model.onnx``: the causal-LM contract with ``inputs_embeds`` in place of
  ``input_ids``: ``attention_mask`` int64 [batch, past + sequence], ``position_ids``
  int64 [batch, sequence], ``past_key_values.{i}.key`` / ``.value`` float [batch,
  kv_heads, past, head_dim] -> ``logits`` float [batch, sequence, vocab],
  ``present.{i}.key`` / ``.value``.

The sample rate is the feature extractor's (``preprocessor_config.json``, 16 kHz for
both families), which the package keeps for ``mobius generate``
(:mod:`mobius_audio.audio_language`).

``mobius build --validate`` runs :mod:`mobius_audio.validate_audio_language`.

The module gives ``audio_inputs(dtype)``, ``audio_modules()``, ``audio_features(op,
input_features, feature_attention_mask)``, ``audio_outputs()``, ``embed(op, input_ids,
audio_features)`` and ``decode(...)`` (:class:`mobius_audio.models._audio_lm.AudioLanguageModel`).
"""

from __future__ import annotations

from mobius.tasks import EncoderGraph, MultimodalDecoderTask


class AudioLanguageTask(MultimodalDecoderTask):
    """Audio features merged into a text decoder's embeddings (see the module docstring)."""

    name = "audio-language"

    def encoders(self, module) -> list[EncoderGraph]:
        """The audio graph."""
        return [
            EncoderGraph(
                "audio",
                module.audio_inputs,
                module.audio_modules,
                module.audio_features,
                module.audio_outputs,
            )
        ]
