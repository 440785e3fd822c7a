"""The vision–language contracts: one graph, or the split form runtimes load.

Core's multimodal-decoder contract (:class:`mobius.tasks.MultimodalDecoderTask`) with
the image encoder; what follows is that contract as vision–language families meet it.

``--form split`` (the default) writes three graphs:

- ``vision/model.onnx``: ``pixel_values`` float [num_images, channels, height, width]
  (the module may declare more vision inputs, after ``pixel_values``: InstructBLIP's
  ``qformer_input_ids``/``qformer_attention_mask`` int64 [num_images, qformer_sequence],
  the instruction its Q-Former reads; the single form gets them empty on decode steps)
  -> ``image_features``
  [num_image_tokens, hidden], every image's tokens in order, already projected to
  the text decoder's width;
- ``embedding/model.onnx``: ``input_ids`` int64 [batch, sequence] and
  ``image_features`` -> ``inputs_embeds`` [batch, sequence, hidden], the token
  embeddings with the image placeholders replaced by the features in order
  (feed ``image_features`` with no rows when the ids hold no placeholder);
- ``decoder/model.onnx``: the causal-LM contract with ``inputs_embeds`` in place of
  ``input_ids`` (``attention_mask``, ``position_ids``, ``past_key_values.{i}.*`` ->
  ``logits``, ``present.{i}.*``).

``--form single`` writes ``model.onnx``: the causal-LM contract plus
``pixel_values``; decode steps pass ``pixel_values`` with no images (an ``If``
skips the vision tower then).

The module gives ``vision_inputs(dtype)``, ``vision_modules()`` (the submodules
``image_features`` reads), ``image_features(op, *vision_inputs)``,
``embed(op, input_ids, image_features)`` and ``decode(op, inputs_embeds,
attention_mask, position_ids, past, *extras)``, and describes its cache like a
causal LM. ``extras`` are the family's own decoder inputs, ``decoder_inputs()``
(Gemma 3's ``token_type_ids``, which mark the image tokens that attend both ways);
the single graph derives them from ``input_ids`` (``decoder_inputs_from_ids``).

A family whose image placement the processor gives, not the ids (Kosmos-2's
``image_embeds_position_mask`` int64 [batch, sequence], 1 where an image feature goes,
over ordinary vocabulary ids), names it in ``embedding_inputs()``: the embedding graph
(and the single graph) take it after ``input_ids`` and the encoders' outputs, and
``embed`` gets it last; a decode step feeds it with no rows.

A family whose decoder reads more of the images than the merged embeddings
(Qwen3-VL's DeepStack features, added to the hidden states of its first layers)
names them: ``vision_outputs()`` lists the vision graph's outputs, ``image_features``
first (``image_features`` then returns one value per entry), which the embedding
graph takes by name; ``embedding_outputs()`` lists the embedding graph's outputs
beyond ``inputs_embeds`` (``embed`` then returns them after it), which the decoder
graph takes by name, before ``decoder_inputs()``.

The graphs beside ``embedding/`` and ``decoder/`` are the task's :meth:`encoders
<VisionLanguageTask.encoders>` (here ``vision/``); a variant over more kinds of input
adds one per kind (:mod:`.audio_vision_language`: ``audio/``), whose outputs the
embedding graph takes after the vision graph's, and the single graph gets each one's
inputs (empty where a prompt has none, each tower behind its own ``If``).

The form comes from the build option ``form`` (``mobius build --form``, registered
by mobius-vision). onnxruntime-genai's generator runs the split form of the
families it has a class for (:mod:`mobius_vision.genai`).
"""

from __future__ import annotations

import dataclasses

from mobius.errors import MobiusError
from mobius.tasks import EncoderGraph, MultimodalDecoderTask
from mobius_vision.config import VISION_LANGUAGE_FORMS, VisionLanguageConfig
from mobius_vision.processing._settings import keep_processor_config

__all__ = ["EncoderGraph", "VisionLanguageTask", "apply_form"]


def apply_form(config, options):
    """``config`` with the package layout ``options.plugin["form"]`` asks (``"split"`` by default)."""
    form = options.plugin.get("form", "split")
    if form not in VISION_LANGUAGE_FORMS:
        raise MobiusError(f"unknown form {form!r}; choose {', '.join(VISION_LANGUAGE_FORMS)}")
    if isinstance(config, VisionLanguageConfig):
        config = dataclasses.replace(config, form=form)
    return config


class VisionLanguageTask(MultimodalDecoderTask):
    """Image features merged into a text decoder's embeddings (see the module docstring)."""

    name = "vision-language"
    genai = True

    def configure(self, config, options, source):
        """The config in the form the build asks (:func:`apply_form`); encoder options refused.

        The package keeps the source's HF processor settings, which ``mobius generate``
        reads (:func:`~mobius_vision.processing.keep_processor_config`).
        """
        keep_processor_config(source)
        return apply_form(super().configure(config, options, source), options)

    def genai_config(self, package) -> dict:
        """``genai_config.json`` for a split package of a family the generator has a class for."""
        from mobius_vision.genai import vision_language_genai_config

        return vision_language_genai_config(package, ep=self.ep)

    def encoders(self, module) -> list[EncoderGraph]:
        """The graphs beside the embedding and decoder, each over one kind of input: here the
        vision graph. A variant adds its own (:mod:`.audio_vision_language`)."""
        return [
            EncoderGraph(
                "vision",
                module.vision_inputs,
                module.vision_modules,
                module.image_features,
                module.vision_outputs,
            )
        ]
