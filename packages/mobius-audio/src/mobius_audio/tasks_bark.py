"""The ``bark-text-to-audio`` contract: Bark's three GPT stages and EnCodec's decoder, four graphs.

Registered with core's registry by :mod:`mobius_audio.plugin`; built from a
``BarkModel`` checkpoint (:mod:`mobius_audio.models.bark`). The loop that chains
them (prompts, windows, logits rules, sampling) is the runner's
(:mod:`mobius_audio.bark_generate`); the token offsets and windows it uses come from
the package's ``generation_config.json``. All float tensors are float32.

``semantic/model.onnx`` (text -> semantic tokens)
    The causal-LM contract: inputs ``input_ids`` int64 [batch, sequence],
    ``attention_mask`` int64 [batch, total_sequence], ``position_ids`` int64 [batch,
    sequence], ``past_key_values.{i}.key`` / ``.value`` float [batch, heads,
    past_sequence, head_dim] (empty at the prefill); outputs ``logits`` float [batch,
    sequence, output_vocab_size] and ``present.{i}.key`` / ``.value`` [batch, heads,
    total_sequence, head_dim]. One more input, ``history_ids`` int64 [batch,
    sequence]: where it is not negative, the embedding of that id is added to the
    embedding of ``input_ids`` (Bark's prompt sums the text, moved up by
    ``text_encoding_offset``, and the semantic history, position by position); -1
    adds nothing (the infer token, every decoded token).

``coarse_acoustics/model.onnx`` (semantic tokens -> the first two codebooks, interleaved)
    The causal-LM contract as above, nothing added.

``fine_acoustics/model.onnx`` (the remaining codebooks, one at a time)
    inputs ``input_ids`` int64 [batch, sequence, n_codes_total] (every codebook's codes,
    ``codebook_size`` where not yet known) and ``codebook_idx`` int64 [] (the codebook
    to predict, ``n_codes_given`` to ``n_codes_total - 1``); output ``logits`` float
    [batch, sequence, output_vocab_size] over that codebook's codes (the first
    ``codebook_size`` are codes). Not causal: every position sees all.

``codec_decoder/model.onnx`` (codes -> waveform)
    input ``audio_codes`` int64 [batch, codebooks, frames] (any number of leading
    codebooks up to the codec's quantizers; Bark gives ``n_fine_codebooks``); output
    ``waveform`` float [batch, samples], ``samples = frames * hop_length``, at the
    codec's ``sampling_rate`` (24 kHz for ``suno/bark``).

The module provides ``semantic`` and ``coarse_acoustics`` (causal LMs with
``cache_layout()`` and ``__call__(op, input_ids, attention_mask, position_ids, past,
history_ids=None)``), ``fine_acoustics(op, input_ids, codebook_idx)`` and
``codec_model(op, audio_codes)``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, present_shape, set_output

INT64 = ir.DataType.INT64
#: The graphs of a Bark package, in the order they run.
GRAPHS = ("semantic", "coarse_acoustics", "fine_acoustics", "codec_decoder")


class BarkTask(ModelTask):
    """Four graphs; see the module docstring."""

    name = "bark-text-to-audio"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        if dtype != ir.DataType.FLOAT:  # the codec's LSTM and the samplers are float32
            raise ConfigError(f"bark graphs are built in float32, not {dtype.name}")
        return {
            "semantic/model": self._causal_lm("semantic", module.semantic, dtype, history=True),
            "coarse_acoustics/model": self._causal_lm(
                "coarse_acoustics", module.coarse_acoustics, dtype
            ),
            "fine_acoustics/model": self._fine(module.fine_acoustics, config, dtype),
            "codec_decoder/model": self._codec(module.codec_model, dtype),
        }

    def _causal_lm(self, name: str, stage, dtype, history: bool = False) -> ir.Model:
        graph, builder = self.new_graph(name)
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
        position_ids = builder.input("position_ids", INT64, ["batch", "sequence"])
        layout = stage.cache_layout()
        past = [
            tuple(
                builder.input(f"past_key_values.{i}.{kind}", dtype, shape) for kind, shape in layer
            )
            for i, layer in enumerate(layout)
        ]
        extra = [builder.input("history_ids", INT64, ["batch", "sequence"])] if history else []
        logits, present = stage(builder.op, input_ids, attention_mask, position_ids, past, *extra)
        vocab = stage.config.output_vocab_size
        set_output(builder, logits, "logits", dtype, ["batch", "sequence", vocab])
        for i, (values, layer) in enumerate(zip(present, layout, strict=True)):
            for value, (kind, shape) in zip(values, layer, strict=True):
                set_output(builder, value, f"present.{i}.{kind}", dtype, present_shape(shape))
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

    def _fine(self, stage, config, dtype) -> ir.Model:
        graph, builder = self.new_graph("fine_acoustics")
        codes = config.fine_acoustics.n_codes_total
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence", codes])
        codebook_idx = builder.input("codebook_idx", INT64, [])
        logits = stage(builder.op, input_ids, codebook_idx)
        vocab = config.fine_acoustics.output_vocab_size
        set_output(builder, logits, "logits", dtype, ["batch", "sequence", vocab])
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

    def _codec(self, codec, dtype) -> ir.Model:
        graph, builder = self.new_graph("codec_decoder")
        codes = builder.input("audio_codes", INT64, ["batch", "codebooks", "frames"])
        waveform = codec(builder.op, codes)
        set_output(builder, waveform, "waveform", dtype, ["batch", "samples"])
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
