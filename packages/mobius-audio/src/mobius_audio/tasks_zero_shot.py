"""The zero-shot audio-classification contract of audio–text dual encoders (CLAP).

The audio twin of mobius-vision's ``zero-shot-image-classification``: one graph,
``model.onnx``, with both towers, their normalised embeddings and the scaled
similarities, named as transformers' ``ClapModel`` names them.

Inputs:

- ``input_ids`` int64 [text_batch, sequence] and ``attention_mask`` int64
  [text_batch, sequence]: the labels through the package's tokenizer, padded together;
- ``input_features`` float [audio_batch, channels, frames, mel_bins]: the log-mel
  spectrograms as ``ClapFeatureExtractor`` makes them (:mod:`mobius_audio.clap_features`
  is its numpy twin): one per clip for an unfused model (``truncation="rand_trunc"``),
  four for a fused one (``enable_fusion``, ``truncation="fusion"``: the whole clip shrunk
  to the window, then three crops). ``frames`` is the extractor's
  ``max_length_s * sampling_rate // hop_length + 1``; the graph stretches fewer frames
  than the tower's ``spec_size * freq_ratio`` as transformers does, and cannot take more;
- ``is_longer`` bool [audio_batch, 1], fused models only: which clips' crops are fused
  in (the extractor's ``is_longer``).

Outputs:

- ``logits_per_audio`` [audio_batch, text_batch]: cosine similarities times
  ``exp(logit_scale_a)``;
- ``logits_per_text`` [text_batch, audio_batch]: the same similarities transposed, times
  ``exp(logit_scale_t)`` (CLAP learns two scales);
- ``text_embeds`` [text_batch, projection_dim] and ``audio_embeds`` [audio_batch,
  projection_dim], L2-normalised (what ``get_text_features`` / ``get_audio_features``
  return).

The module takes ``(input_ids, attention_mask, input_features[, is_longer])`` and returns
a dict of those four; the config gives ``num_mel_bins``, ``audio_channels``,
``enable_fusion`` and ``projection_dim``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output

INT64 = ir.DataType.INT64


class ZeroShotAudioClassificationTask(ModelTask):
    """One graph: both towers, their normalised embeddings and the similarity logits."""

    name = "zero-shot-audio-classification"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("zero_shot_audio_classification")
        input_ids = builder.input("input_ids", INT64, ["text_batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["text_batch", "sequence"])
        channels, mels = config.audio_channels, config.num_mel_bins
        features = builder.input("input_features", dtype, ["audio_batch", channels, "frames", mels])
        inputs = [input_ids, attention_mask, features]
        if config.enable_fusion:
            inputs.append(builder.input("is_longer", ir.DataType.BOOL, ["audio_batch", 1]))
        outputs = module(builder.op, *inputs)
        dim = config.projection_dim
        shapes = {
            "logits_per_audio": ["audio_batch", "text_batch"],
            "logits_per_text": ["text_batch", "audio_batch"],
            "text_embeds": ["text_batch", dim],
            "audio_embeds": ["audio_batch", dim],
        }
        for name, shape in shapes.items():
            set_output(builder, outputs[name], name, dtype, shape)
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
