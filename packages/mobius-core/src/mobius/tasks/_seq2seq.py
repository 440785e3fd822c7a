"""The encoder–decoder (sequence-to-sequence) contract: two graphs, the cross-attention cache made once.

``encoder/model.onnx``
    inputs ``input_ids``, ``attention_mask`` int64 [batch, encoder_sequence];
    outputs ``last_hidden_state`` [batch, encoder_sequence, hidden] and, per
    decoder layer, its cross-attention cache ``present.{i}.encoder.key`` /
    ``.value`` [batch, heads, encoder_sequence, head_dim]. The encoder graph
    projects them: they depend on the source alone, so generation computes them
    once, not at every step.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, decoder_sequence], ``encoder_attention_mask``
    int64 [batch, encoder_sequence], and per layer the self-attention cache
    ``past_key_values.{i}.decoder.key`` / ``.value`` [batch, heads,
    past_decoder_sequence, head_dim] (empty at the first step) and the encoder's
    ``past_key_values.{i}.encoder.key`` / ``.value``; outputs ``logits`` [batch,
    decoder_sequence, vocab] and ``present.{i}.decoder.key`` / ``.value`` [batch,
    heads, total_decoder_sequence, head_dim]. Decoder tokens are all real (every
    row starts from the decoder start token), so there is no decoder mask.

The module provides ``encode(op, input_ids, attention_mask) -> (hidden, [(k, v)])``,
``decode(op, input_ids, encoder_attention_mask, self_cache, cross_cache) ->
(logits, [(k, v)])`` and ``cache_shapes() -> (layers, heads, head_dim)``. A task over
another kind of source (mobius-audio's speech-to-text task) overrides
:meth:`Seq2SeqTask.encoder_inputs` and :meth:`Seq2SeqTask.decoder_source_inputs`.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks._base import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64


class Seq2SeqTask(ModelTask):
    """Encoder and decoder graphs; see the module docstring for the contract."""

    name = "seq2seq"

    def encoder_inputs(self, builder, config, dtype: ir.DataType) -> list[ir.Value]:
        """The encoder graph's inputs, passed to ``module.encode`` in this order."""
        return [
            builder.input("input_ids", INT64, ["batch", "encoder_sequence"]),
            builder.input("attention_mask", INT64, ["batch", "encoder_sequence"]),
        ]

    def decoder_source_inputs(self, builder) -> list[ir.Value]:
        """What the decoder graph reads of the source besides the cross cache (its padding mask)."""
        return [builder.input("encoder_attention_mask", INT64, ["batch", "encoder_sequence"])]

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        layers, heads, head_dim = module.cache_shapes()
        cache = ["batch", heads, "encoder_sequence", head_dim]
        hidden_size = config.hidden_size

        graph, builder = self.new_graph("encoder")
        hidden, cross = module.encode(builder.op, *self.encoder_inputs(builder, config, dtype))
        set_output(
            builder, hidden, "last_hidden_state", dtype, ["batch", "encoder_sequence", hidden_size]
        )
        for i, (key, value) in enumerate(cross):
            set_output(builder, key, f"present.{i}.encoder.key", dtype, cache)
            set_output(builder, value, f"present.{i}.encoder.value", dtype, cache)
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        decoder_module = twin_module(module)
        graph, builder = self.new_graph("decoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "decoder_sequence"])
        source = self.decoder_source_inputs(builder)
        past = ["batch", heads, "past_decoder_sequence", head_dim]
        self_cache = [
            tuple(
                builder.input(f"past_key_values.{i}.decoder.{kind}", dtype, past)
                for kind in ("key", "value")
            )
            for i in range(layers)
        ]
        cross_cache = [
            tuple(
                builder.input(f"past_key_values.{i}.encoder.{kind}", dtype, cache)
                for kind in ("key", "value")
            )
            for i in range(layers)
        ]
        logits, present = decoder_module.decode(
            builder.op, input_ids, *source, self_cache, cross_cache
        )
        set_output(
            builder, logits, "logits", dtype, ["batch", "decoder_sequence", config.vocab_size]
        )
        total = ["batch", heads, "total_decoder_sequence", head_dim]
        for i, (key, value) in enumerate(present):
            set_output(builder, key, f"present.{i}.decoder.key", dtype, total)
            set_output(builder, value, f"present.{i}.decoder.value", dtype, total)
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"encoder/model": encoder, "decoder/model": decoder}
