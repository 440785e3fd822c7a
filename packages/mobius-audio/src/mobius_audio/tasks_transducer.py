"""The ``transducer`` contract: speech to text by a transducer (RNN-T, TDT), in three graphs.

Registered with core's registry by :mod:`mobius_audio.plugin`; run by
:mod:`mobius_audio.transducer` (greedy decoding). Built from Parakeet's
``ParakeetForRNNT`` and ``ParakeetForTDT`` (:mod:`mobius_audio.models.parakeet_transducer`).
``hidden`` below is the joint's width (``decoder_hidden_size``), ``layers`` the
prediction network's LSTM layers (``num_decoder_layers``); every float is the build
dtype (float32 by default).

``encoder/model.onnx``
    inputs ``input_features`` float [batch, frames, num_mel_bins] (the normalised
    log-mels of ``ParakeetFeatureExtractor``, 16 kHz audio, 100 frames a second) and
    ``attention_mask`` int64 [batch, frames] (1 real, 0 padding, as the extractor
    returns it). Outputs ``encoder_hidden_states`` float [batch, encoder_frames,
    hidden]: the encoder's states already through ``encoder_projector``, as the
    joint adds them; ``encoder_lengths`` int64 [batch]: each row's real frames
    after the subsampling (frames past it are padding).

``decoder/model.onnx`` (the prediction network, one step)
    inputs ``token_ids`` int64 [batch] (each row's previous token; the first step
    takes the decoder start token, the blank), ``past_hidden_state`` and
    ``past_cell_state`` float [layers, batch, hidden] (zeros at the first step).
    Outputs ``decoder_hidden_states`` float [batch, hidden], ``present_hidden_state``
    and ``present_cell_state`` float [layers, batch, hidden].

``joint/model.onnx``
    inputs ``encoder_hidden_states`` float [batch, hidden] (one encoder frame per
    row) and ``decoder_hidden_states`` float [batch, hidden]. Outputs
    ``token_logits`` float [batch, vocab_size] (``blank_token_id`` is the blank)
    and, for TDT, ``duration_logits`` float [batch, num_durations]: one per entry
    of ``config.json``'s ``durations`` (frames to advance).

Decoding (``config.json``'s ``blank_token_id``, ``max_symbols_per_step``,
``durations``) is the runner's; the module provides ``encode(op, input_features,
attention_mask) -> (states, lengths)``, ``decode_step(op, token_ids, hidden_state,
cell_state) -> (output, hidden_state, cell_state)``, ``joint_logits(op,
encoder_states, decoder_states) -> dict`` and a config with ``num_mel_bins``,
``decoder_hidden_size``, ``num_decoder_layers``, ``vocab_size`` and ``durations``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64


class TransducerTask(ModelTask):
    """Encoder, one-step prediction network and joint; see the module docstring."""

    name = "transducer"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        hidden, layers = config.decoder_hidden_size, config.num_decoder_layers
        graph, builder = self.new_graph("encoder")
        features = builder.input("input_features", dtype, ["batch", "frames", config.num_mel_bins])
        mask = builder.input("attention_mask", INT64, ["batch", "frames"])
        states, lengths = module.encode(builder.op, features, mask)
        set_output(
            builder, states, "encoder_hidden_states", dtype, ["batch", "encoder_frames", hidden]
        )
        set_output(builder, lengths, "encoder_lengths", INT64, ["batch"])
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        # A parameter belongs to the first graph that uses it: each graph gets its own tree.
        decoder_module = twin_module(module)
        graph, builder = self.new_graph("decoder")
        token_ids = builder.input("token_ids", INT64, ["batch"])
        state_shape = [layers, "batch", hidden]
        past = [
            builder.input(f"past_{n}", dtype, state_shape) for n in ("hidden_state", "cell_state")
        ]
        output, *present = decoder_module.decode_step(builder.op, token_ids, *past)
        set_output(builder, output, "decoder_hidden_states", dtype, ["batch", hidden])
        for name, value in zip(("hidden_state", "cell_state"), present, strict=True):
            set_output(builder, value, f"present_{name}", dtype, state_shape)
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        joint_module = twin_module(module)
        graph, builder = self.new_graph("joint")
        encoder_states = builder.input("encoder_hidden_states", dtype, ["batch", hidden])
        decoder_states = builder.input("decoder_hidden_states", dtype, ["batch", hidden])
        logits = joint_module.joint_logits(builder.op, encoder_states, decoder_states)
        widths = {"token_logits": config.vocab_size, "duration_logits": len(config.durations)}
        for name, value in logits.items():
            set_output(builder, value, name, dtype, ["batch", widths[name]])
        joint = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"encoder/model": encoder, "decoder/model": decoder, "joint/model": joint}
