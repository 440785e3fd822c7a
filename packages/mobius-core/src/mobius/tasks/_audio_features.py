"""The audio-encoder contract: frame features and, with a head, CTC or utterance logits.

Inputs: ``input_values`` float [batch, samples] (the feature extractor's
normalised waveform) and ``attention_mask`` int64 [batch, samples] (1 for real
samples, 0 for padding). A model whose feature extractor returns no mask
(``return_attention_mask=False``, base wav2vec2 with group norm) is run by
transformers without one: pass all ones, which is the same computation.
A module whose checkpoint takes frame features instead (Wav2Vec2-BERT's
``input_features`` [batch, frames, features], masked per frame) declares its
inputs in ``input_shapes()``: name -> shape, ``attention_mask`` int64 last.
Outputs, as the module declares them in ``output_shapes()``:

- ``last_hidden_state`` [batch, frames, hidden] (``frames`` from the conv
  feature encoder's kernels and strides);
- ``logits`` [batch, frames, vocab] for ``*ForCTC`` checkpoints;
- ``logits`` [batch, num_labels] for ``*ForSequenceClassification`` (mean over
  the real frames).

The head comes from the checkpoint's ``architectures``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks._base import IR_VERSION, ModelTask, new_graph, set_output


class AudioFeatureExtractionTask(ModelTask):
    """One graph; the module takes ``(input_values, attention_mask)`` (or the inputs its
    ``input_shapes()`` declares, in that order) and returns a dict."""

    name = "audio-feature-extraction"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = new_graph("audio_feature_extraction")
        declared = {"input_values": ["batch", "samples"], "attention_mask": ["batch", "samples"]}
        if hasattr(module, "input_shapes"):
            declared = module.input_shapes()
        inputs = [
            builder.input(name, ir.DataType.INT64 if name == "attention_mask" else dtype, shape)
            for name, shape in declared.items()
        ]
        outputs = module(builder.op, *inputs)
        shapes = module.output_shapes()
        for name, value in outputs.items():
            set_output(builder, value, name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
