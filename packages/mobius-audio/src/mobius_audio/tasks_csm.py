"""The ``conversational-speech`` contract (CSM): backbone, depth decoder and Mimi graphs.

Registered with core's registry by :mod:`mobius_audio.plugin`. The package holds the
four graphs below, CSM's ``config.json`` (``num_codebooks``, ``vocab_size``,
``codebook_eos_token_id``, ``codec_config`` with Mimi's ``sampling_rate``, 24 kHz on
the hub), ``generation_config.json`` (the backbone's sampling settings and the depth
decoder's as ``depth_decoder_*``) and the tokenizer files. ``K`` is ``num_codebooks``.

``backbone/model.onnx`` (the causal-LM contract with frames for tokens)
    inputs ``input_ids`` int64 [batch, sequence, K + 1]: per position ``K`` audio codes
    then one text token, -1 where absent. A text position is ``[-1] * K + [token]``
    (its text embedding); an audio frame is ``codes + [-1]`` (the sum of its
    codebooks' embeddings, as transformers embeds generated frames; the audio-eos
    frame of a context turn is ``[0] * K + [-1]``). ``attention_mask`` int64 [batch,
    past_sequence + sequence] (1 real, 0 padding: left padding), ``position_ids``
    int64 [batch, sequence], per layer ``past_key_values.{i}.key`` / ``.value`` float
    [batch, kv_heads, past_sequence, head_dim]. Outputs ``logits`` float [batch,
    sequence, vocab] (codebook 0 of the next frame), ``last_hidden_state`` float
    [batch, sequence, hidden] (the depth decoder's first input) and
    ``present.{i}.key`` / ``.value``.

``depth_decoder/model.onnx`` (one frame's codebooks 1..K-1, with its own cache)
    inputs ``input_ids`` int64 [batch, sequence]: the codes at depth positions
    ``past_depth .. past_depth + sequence`` (position ``p >= 1`` holds codebook
    ``p - 1``; position 0 is a placeholder), ``backbone_last_hidden_state`` float
    [batch, backbone_hidden] (read at position 0) and ``past_key_values.{i}.key`` /
    ``.value`` float [batch, kv_heads, past_depth, head_dim] (empty for a new frame).
    Outputs ``logits`` float [batch, sequence, vocab] (position ``p`` predicts
    codebook ``p``; position 0's row is meaningless) and ``present.{i}.key`` /
    ``.value``. transformers starts each frame from ``[0, code0]`` with the backbone's
    last hidden state, then feeds each new code.

``codec_encoder/model.onnx`` (Mimi's encode, for context turns' audio)
    input ``input_values`` float [batch, 1, samples] at the codec's ``sampling_rate``;
    output ``audio_codes`` int64 [batch, num_quantizers, frames] (the backbone reads
    the first ``K``; the hub's Mimi has ``K`` quantizers).

``codec_decoder/model.onnx`` (Mimi's decode)
    input ``audio_codes`` int64 [batch, K, frames]; output ``audio_values`` float
    [batch, 1, samples] at the codec's ``sampling_rate`` (``frames * hop`` samples).

The module provides ``backbone(op, frames, attention_mask, position_ids, past)``,
``depth_step(op, codes, backbone_last_hidden_state, past)``, ``encode_audio(op,
input_values)``, ``decode_audio(op, audio_codes)`` and a config with ``backbone`` / ``depth`` (``num_hidden_layers``,
``num_key_value_heads``, ``head_dim``, ``hidden_size``), ``num_codebooks`` and
``vocab_size``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module
from mobius_audio.tasks_codec import require_float32

INT64 = ir.DataType.INT64


def _cache_inputs(builder, stack, dtype: ir.DataType, past: str) -> list:
    """Per layer the ``past_key_values.{i}.key`` / ``.value`` inputs."""
    shape = ["batch", stack.num_key_value_heads, past, stack.head_dim]
    return [
        tuple(
            builder.input(f"past_key_values.{i}.{kind}", dtype, shape) for kind in ("key", "value")
        )
        for i in range(stack.num_hidden_layers)
    ]


def _cache_outputs(builder, presents, stack, dtype: ir.DataType, total: str) -> None:
    shape = ["batch", stack.num_key_value_heads, total, stack.head_dim]
    for i, (key, value) in enumerate(presents):
        set_output(builder, key, f"present.{i}.key", dtype, shape)
        set_output(builder, value, f"present.{i}.value", dtype, shape)


class ConversationalSpeechTask(ModelTask):
    """Backbone, depth decoder and Mimi encoder/decoder graphs; see the module docstring."""

    name = "conversational-speech"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        require_float32(dtype, "conversational-speech (Mimi)")
        return {
            "backbone/model": self._backbone(module, config, dtype),
            "depth_decoder/model": self._depth_decoder(twin_module(module), config, dtype),
            "codec_encoder/model": self._codec_encoder(twin_module(module), config, dtype),
            "codec_decoder/model": self._codec_decoder(twin_module(module), config, dtype),
        }

    def _backbone(self, module, config, dtype):
        stack = config.backbone
        graph, builder = self.new_graph("backbone")
        frames = builder.input("input_ids", INT64, ["batch", "sequence", config.num_codebooks + 1])
        mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
        positions = builder.input("position_ids", INT64, ["batch", "sequence"])
        past = _cache_inputs(builder, stack, dtype, "past_sequence")
        logits, hidden, presents = module.backbone(builder.op, frames, mask, positions, past)
        set_output(builder, logits, "logits", dtype, ["batch", "sequence", config.vocab_size])
        states = ["batch", "sequence", stack.hidden_size]
        set_output(builder, hidden, "last_hidden_state", dtype, states)
        _cache_outputs(builder, presents, stack, dtype, "total_sequence")
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

    def _depth_decoder(self, module, config, dtype):
        stack = config.depth
        graph, builder = self.new_graph("depth_decoder")
        codes = builder.input("input_ids", INT64, ["batch", "sequence"])
        state = builder.input(
            "backbone_last_hidden_state", dtype, ["batch", config.backbone.hidden_size]
        )
        past = _cache_inputs(builder, stack, dtype, "past_depth")
        logits, presents = module.depth_step(builder.op, codes, state, past)
        set_output(builder, logits, "logits", dtype, ["batch", "sequence", config.vocab_size])
        _cache_outputs(builder, presents, stack, dtype, "total_depth")
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

    def _codec_encoder(self, module, config, dtype):
        graph, builder = self.new_graph("codec_encoder")
        shape = ["batch", config.codec.channels, "samples"]
        codes = module.encode_audio(builder.op, builder.input("input_values", dtype, shape))
        set_output(
            builder, codes, "audio_codes", INT64, ["batch", config.codec.n_codebooks, "frames"]
        )
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

    def _codec_decoder(self, module, config, dtype):
        graph, builder = self.new_graph("codec_decoder")
        codes = builder.input("audio_codes", INT64, ["batch", "num_codebooks", "frames"])
        audio = module.decode_audio(builder.op, codes)
        shape = ["batch", config.codec.channels, "samples"]
        set_output(builder, audio, "audio_values", dtype, shape)
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
