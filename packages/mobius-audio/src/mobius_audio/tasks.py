"""mobius-audio's tasks (I/O contracts): speech-to-text and audio feature extraction.

Registered with core's registry by :mod:`mobius_audio.plugin`
(``speech-to-text``, ``audio-feature-extraction``).

**speech-to-text** (:class:`SpeechToTextTask`): core's seq2seq contract
(:class:`mobius.tasks.Seq2SeqTask`), two graphs, with audio for a source.

``encoder/model.onnx``
    input: the source, as the model's feature extractor makes it, in the build
    dtype. Whisper: ``input_features`` [batch, num_mel_bins, frames] (the log-mel
    spectrogram, e.g. 80 or 128 bins over 3000 frames of 30 s). A module may name
    another (``speech_input``): Speech2Text's ``input_features`` [batch, frames,
    feature_size] (fbank), Moonshine's and SpeechT5's ``input_values`` [batch,
    samples] (the raw waveform). Outputs ``last_hidden_state`` [batch, encoder_sequence, hidden]
    and, per decoder layer, the cross-attention cache ``present.{i}.encoder.key``
    / ``.value`` [batch, heads, encoder_sequence, head_dim], projected once.
    ``encoder_sequence`` is what the front end makes of the source (Whisper's
    stride-2 convolution halves the frames).

    Whisper has no attention mask: it attends over the whole padded window, as
    transformers does. A model that masks padding (Speech2Text, Moonshine, SpeechT5) also
    takes ``attention_mask`` int64 [batch, frames or samples] (1 real, 0 padding,
    as its extractor returns it) and outputs ``encoder_attention_mask`` int64
    [batch, encoder_sequence]: the mask reduced through the front end's
    subsampling, as transformers reduces it.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, decoder_sequence] and per layer
    ``past_key_values.{i}.decoder.key`` / ``.value`` [batch, heads,
    past_decoder_sequence, head_dim] (empty at the first step) and the encoder's
    ``past_key_values.{i}.encoder.key`` / ``.value``; outputs ``logits`` [batch,
    decoder_sequence, vocab] and ``present.{i}.decoder.key`` / ``.value``. A model
    that masks padding also takes the encoder's ``encoder_attention_mask``, exactly
    :class:`~mobius.tasks.Seq2SeqTask`'s decoder; Whisper's decoder has no
    such input (every encoder position is real).

onnxruntime-genai's generator runs Whisper packages with a 30 s window
(:mod:`mobius_audio.genai` writes their ``genai_config.json``).

The prompt tokens (``<|startoftranscript|>``, language, task, ``<|notimestamps|>``),
timestamps and suppressed tokens are the generation loop's business, as in
transformers. The module provides ``encode(op, source) -> (hidden, [(k, v)])``,
``decode(op, input_ids, self_cache, cross_cache) -> (logits, [(k, v)])``,
``cache_shapes()`` and a config with ``num_mel_bins``. A model that masks padding
also provides ``speech_input() -> (name, shape)`` and
``encoder_attention_mask(op, source, attention_mask) -> [batch, encoder_sequence]``;
its ``encode`` then takes ``(op, source, encoder_attention_mask)`` and its
``decode`` ``(op, input_ids, encoder_attention_mask, self_cache, cross_cache)``.

**audio-feature-extraction** (:class:`AudioFeatureExtractionTask`): frame
features and, with a head, CTC or utterance logits. Inputs: ``input_values``
float [batch, samples] (the feature extractor's normalised waveform) and
``attention_mask`` int64 [batch, samples] (1 for real samples, 0 for padding). A
model whose feature extractor returns no mask (``return_attention_mask=False``,
base wav2vec2 with group norm) is run by transformers without one: pass all
ones, which is the same computation. A module whose checkpoint takes frame
features instead (Wav2Vec2-BERT's ``input_features`` [batch, frames, features],
masked per frame; Parakeet's normalised log-mels [batch, frames, mels], which its
encoder subsamples, so the outputs have fewer frames) declares its inputs in
``input_shapes()``: name -> shape,
``attention_mask`` int64 last. AST (``audio-spectrogram-transformer``) takes its
extractor's fixed window alone, ``input_values`` [batch, max_length, num_mel_bins]
(Kaldi fbank frames), with no mask. Outputs, as the module declares them in
``output_shapes()``:

- ``last_hidden_state`` [batch, frames, hidden] (``frames`` from the conv
  feature encoder's kernels and strides);
- ``logits`` [batch, frames, vocab] for ``*ForCTC`` checkpoints;
- ``logits`` [batch, num_labels] for ``*ForSequenceClassification`` (mean over
  the real frames; AST's ``ASTForAudioClassification``: its CLS and distillation
  tokens);
- ``logits`` [batch, frames, num_labels] for ``*ForAudioFrameClassification``
  (diarization: each frame scored, the labels independent — a sigmoid each);
- ``embeddings`` and ``logits`` [batch, xvector_output_dim] for ``*ForXVector``
  (speaker verification: TDNN layers, the mean and unbiased std over each row's
  frames as transformers counts them, the embedding and its classifier; the
  AM-softmax margin only trains).

The head comes from the checkpoint's ``architectures``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, Seq2SeqTask, set_output

INT64 = ir.DataType.INT64
MASK_OUTPUT = "encoder_attention_mask"


def masks_padding(module) -> bool:
    """Whether ``module``'s graphs take a source mask (it reduces one: ``encoder_attention_mask``)."""
    return hasattr(module, "encoder_attention_mask")


class SpeechToTextTask(Seq2SeqTask):
    """Encoder over audio and a cached decoder; see the module docstring."""

    name = "speech-to-text"
    genai = True

    def genai_config(self, package) -> dict:
        """``genai_config.json`` for a family onnxruntime-genai's generator has a class for (Whisper)."""
        from mobius_audio.genai import speech_to_text_genai_config

        return speech_to_text_genai_config(package, ep=self.ep)

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        self._module = module  # the hooks below read what it declares
        models = super().build(module, config, dtype)
        outputs = models["encoder/model"].graph.outputs
        masks = [o for o in outputs if o.name == MASK_OUTPUT]
        for mask in masks:  # made with the inputs; listed after last_hidden_state
            outputs.remove(mask)
            outputs.insert(1, mask)
        return models

    def encoder_inputs(self, builder, config, dtype: ir.DataType) -> list[ir.Value]:
        """The source, and for a masked model the reduced mask (also an output), for ``encode``."""
        module = self._module
        if not masks_padding(module):
            shape = ["batch", config.num_mel_bins, "frames"]
            return [builder.input("input_features", dtype, shape)]
        name, shape = module.speech_input()
        source = builder.input(name, dtype, shape)
        attention_mask = builder.input("attention_mask", INT64, shape[:2])
        reduced = module.encoder_attention_mask(builder.op, source, attention_mask)
        set_output(builder, reduced, MASK_OUTPUT, INT64, ["batch", "encoder_sequence"])
        return [source, reduced]

    def decoder_source_inputs(self, builder) -> list[ir.Value]:
        if masks_padding(self._module):
            return super().decoder_source_inputs(builder)  # encoder_attention_mask
        return []  # Whisper: no encoder padding, the cross cache is all the decoder reads


class AudioFeatureExtractionTask(ModelTask):
    """One graph; the module takes ``(input_values, attention_mask)`` (or the inputs its
    ``input_shapes()`` declares, in that order) and returns a dict."""

    name = "audio-feature-extraction"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("audio_feature_extraction")
        declared = {"input_values": ["batch", "samples"], "attention_mask": ["batch", "samples"]}
        if hasattr(module, "input_shapes"):
            declared = module.input_shapes()
        inputs = [
            builder.input(name, INT64 if name == "attention_mask" else dtype, shape)
            for name, shape in declared.items()
        ]
        outputs = module(builder.op, *inputs)
        shapes = module.output_shapes()
        for name, value in outputs.items():
            set_output(builder, value, name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
