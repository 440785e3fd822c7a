"""The ``text-to-dialogue`` contract (Dia): a text encoder and a multi-codebook decoder.

Registered with core's registry by :mod:`mobius_audio.plugin`. The package holds the
two graphs below and Dia's ``config.json`` (``delay_pattern``, the decoder's
``num_channels``, ``vocab_size`` and its ``bos``/``eos``/``pad`` ids), and
``generation_config.json`` where the checkpoint has one. The text is UTF-8 bytes
(id = byte value, ``[S1]`` = 1, ``[S2]`` = 2, ``<pad>`` = 0: transformers'
``DiaTokenizer``), right-padded.

``encoder/model.onnx``
    inputs ``input_ids`` int64 [batch, text] and ``attention_mask`` int64 [batch,
    text] (1 real, 0 padding). Outputs ``last_hidden_state`` float [batch, text,
    encoder_hidden] and, per decoder layer ``i``, the cross-attention cache
    ``present.{i}.encoder.key`` / ``.value`` float [batch, cross_kv_heads, text,
    cross_head_dim], projected once.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, decoder_sequence, channels] (one code per
    channel and frame, in the delayed layout: channel ``c`` runs
    ``delay_pattern[c]`` frames behind channel 0), ``encoder_attention_mask`` int64
    [batch, text] (the encoder's ``attention_mask``), per layer
    ``past_key_values.{i}.decoder.key`` / ``.value`` float [batch, kv_heads,
    past_decoder_sequence, head_dim] (empty at the first step) and the encoder's
    ``past_key_values.{i}.encoder.key`` / ``.value``. Outputs ``logits`` float
    [batch, decoder_sequence, channels, vocab] and ``present.{i}.decoder.key`` /
    ``.value`` [batch, kv_heads, past_decoder_sequence + decoder_sequence,
    head_dim]. The decoder attends causally; every frame is real (the runner
    starts every row with one all-``bos`` frame, as transformers' ``DiaProcessor``
    does for text-to-speech).

Audio: the hub's Dia checkpoints hold no codec; transformers' ``DiaProcessor`` loads
``descript/dac_44khz`` beside them. Here the codec is its own package, built once
on the ``audio-codec`` contract (``mobius build --model descript/dac_44khz dac/``),
and the runner takes it at run time: ``mobius generate dia/ "[S1] Hi." --codec dac/``.
That keeps ``mobius build`` one source, one package (a Dia build needs nothing but
its checkpoint), lets one codec package serve every Dia package, and the codec's
own runner (``mobius codec``) checks it alone. The sample rate is the codec's
``sampling_rate`` (44.1 kHz for ``dac_44khz``).

The module provides ``encode(op, input_ids, attention_mask) -> (hidden, [(k, v)])``,
``decode(op, codes, encoder_attention_mask, self_cache, cross_cache) -> (logits,
[(k, v)])`` and a config with ``encoder`` / ``decoder`` stacks (``hidden_size``,
``layers``, ``kv_heads``, ``head_dim``), ``cross_kv_heads``, ``cross_head_dim``,
``num_channels`` and ``vocab_size``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64


class TextToDialogueTask(ModelTask):
    """Encoder (text to states and cross caches) and cached decoder; see the module docstring."""

    name = "text-to-dialogue"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        cross = ["batch", config.cross_kv_heads, "text", config.cross_head_dim]
        graph, builder = self.new_graph("encoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "text"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "text"])
        hidden, cross_cache = module.encode(builder.op, input_ids, attention_mask)
        states = ["batch", "text", config.encoder.hidden_size]
        set_output(builder, hidden, "last_hidden_state", dtype, states)
        for i, (key, value) in enumerate(cross_cache):
            set_output(builder, key, f"present.{i}.encoder.key", dtype, cross)
            set_output(builder, value, f"present.{i}.encoder.value", dtype, cross)
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        decoder_module = twin_module(module)
        stack = config.decoder
        graph, builder = self.new_graph("decoder")
        channels = config.num_channels
        codes = builder.input("input_ids", INT64, ["batch", "decoder_sequence", channels])
        text_mask = builder.input("encoder_attention_mask", INT64, ["batch", "text"])
        past = ["batch", stack.kv_heads, "past_decoder_sequence", stack.head_dim]
        self_cache = [self._pair(builder, f"past_key_values.{i}.decoder", dtype, past) for i in range(stack.layers)]  # fmt: skip
        cross_cache = [self._pair(builder, f"past_key_values.{i}.encoder", dtype, cross) for i in range(stack.layers)]  # fmt: skip
        logits, presents = decoder_module.decode(
            builder.op, codes, text_mask, self_cache, cross_cache
        )
        shape = ["batch", "decoder_sequence", channels, config.vocab_size]
        set_output(builder, logits, "logits", dtype, shape)
        total = ["batch", stack.kv_heads, "total_decoder_sequence", stack.head_dim]
        for i, (key, value) in enumerate(presents):
            set_output(builder, key, f"present.{i}.decoder.key", dtype, total)
            set_output(builder, value, f"present.{i}.decoder.value", dtype, total)
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"encoder/model": encoder, "decoder/model": decoder}

    @staticmethod
    def _pair(builder, prefix: str, dtype: ir.DataType, shape: list) -> tuple[ir.Value, ir.Value]:
        """The ``{prefix}.key`` and ``{prefix}.value`` inputs."""
        return tuple(builder.input(f"{prefix}.{kind}", dtype, shape) for kind in ("key", "value"))
