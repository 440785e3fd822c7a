"""Parakeet transducers: ``ParakeetForRNNT`` and ``ParakeetForTDT``, on the ``transducer`` contract.

The FastConformer encoder of :mod:`.parakeet` (under ``encoder.``), then three parts
that :mod:`mobius_audio.tasks_transducer` builds as three graphs:

- ``encoder_projector``: a Linear from the encoder's ``hidden_size`` to the joint's
  ``decoder_hidden_size``, applied once to every frame;
- ``decoder``, the prediction network: ``embedding`` of the previous token, a
  ``num_decoder_layers`` LSTM (``lstm.weight_ih_l{i}`` / ``weight_hh_l{i}`` /
  ``bias_ih_l{i}`` / ``bias_hh_l{i}``, torch's gate order input, forget, cell,
  output) and ``decoder_projector``, a Linear;
- ``joint``: ``head(activation(encoder frame + decoder output))``; the head's
  ``vocab_size`` token logits (the last id, ``blank_token_id``, is the blank) are
  followed, for TDT, by one logit per entry of ``durations``.

Weight names are transformers' (``model.safetensors`` of the hub's converted
checkpoints, e.g. nvidia/parakeet-tdt-0.6b-v3): the identity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear, TransposedParameter, get_activation
from mobius.errors import ConfigError
from mobius_audio.models.parakeet import ParakeetConfig, ParakeetEncoderModel, _int


@dataclass
class ParakeetTransducerConfig(ParakeetConfig):
    """The encoder's fields and the transducer's: prediction network, joint, decoding."""

    decoder_hidden_size: int = 0
    num_decoder_layers: int = 0
    joint_activation: str = "relu"
    blank_token_id: int = 0
    max_symbols_per_step: int = 1
    durations: tuple[int, ...] = ()  # TDT's; empty for RNN-T

    @classmethod
    def from_hf(cls, hf_config: Any) -> ParakeetTransducerConfig:
        encoder = super().from_hf(hf_config)
        vocab = _int(hf_config, "vocab_size", 2)
        blank = _int(hf_config, "blank_token_id", 0)
        if blank >= vocab:
            raise ConfigError(f"parakeet blank_token_id={blank} is not below vocab_size={vocab}")
        durations = ()
        if hf_config.model_type == "parakeet_tdt":
            durations = getattr(hf_config, "durations", None)
            if (
                not isinstance(durations, (list, tuple))
                or not durations
                or not all(isinstance(d, int) and not isinstance(d, bool) for d in durations)
                or min(durations) < 0
            ):
                raise ConfigError(
                    f"parakeet durations={durations!r} must be a list of frame counts >= 0"
                )
        activation = getattr(hf_config, "hidden_act", "relu")
        if not isinstance(activation, str):
            raise ConfigError(f"parakeet hidden_act={activation!r} is not an activation name")
        return dataclasses.replace(
            encoder,
            vocab_size=vocab,
            decoder_hidden_size=_int(hf_config, "decoder_hidden_size"),
            num_decoder_layers=_int(hf_config, "num_decoder_layers"),
            joint_activation=activation,
            blank_token_id=blank,
            max_symbols_per_step=_int(hf_config, "max_symbols_per_step"),
            durations=tuple(durations),
        )


class StackedLSTM(nn.Module):
    """One step of torch's multi-layer ``nn.LSTM``: ``x [batch, in]``, state ``[layers, batch, hidden]``.

    Parameters keep torch's names (``weight_ih_l0``...), the weights stored ``[in, 4 * hidden]``.
    """

    def __init__(self, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.hidden, self.num_layers = hidden, num_layers
        for i in range(num_layers):  # input size == hidden: the embedding is decoder_hidden_size
            setattr(self, f"weight_ih_l{i}", TransposedParameter(4 * hidden, hidden))
            setattr(self, f"weight_hh_l{i}", TransposedParameter(4 * hidden, hidden))
            setattr(self, f"bias_ih_l{i}", nn.Parameter([4 * hidden]))
            setattr(self, f"bias_hh_l{i}", nn.Parameter([4 * hidden]))

    def forward(self, op, x, hidden_state, cell_state):
        """The top layer's output ``[batch, hidden]`` and the new ``(hidden_state, cell_state)``."""
        hiddens, cells = [], []
        for i in range(self.num_layers):
            h, c = op.Gather(hidden_state, i, axis=0), op.Gather(cell_state, i, axis=0)
            gates = op.Add(
                op.Add(
                    op.MatMul(x, getattr(self, f"weight_ih_l{i}")), getattr(self, f"bias_ih_l{i}")
                ),
                op.Add(
                    op.MatMul(h, getattr(self, f"weight_hh_l{i}")), getattr(self, f"bias_hh_l{i}")
                ),
            )
            gate_in, gate_forget, gate_cell, gate_out = op.Split(
                gates, axis=-1, num_outputs=4, _outputs=4
            )
            c = op.Add(
                op.Mul(op.Sigmoid(gate_forget), c),
                op.Mul(op.Sigmoid(gate_in), op.Tanh(gate_cell)),
            )
            x = op.Mul(op.Sigmoid(gate_out), op.Tanh(c))
            hiddens.append(op.Unsqueeze(x, [0]))
            cells.append(op.Unsqueeze(c, [0]))
        return x, op.Concat(*hiddens, axis=0), op.Concat(*cells, axis=0)


class PredictionNetwork(nn.Module):
    """transformers' ``ParakeetRNNTDecoder``, one token per step."""

    def __init__(self, vocab: int, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.embedding = Embedding(vocab, hidden)
        self.lstm = StackedLSTM(hidden, num_layers)
        self.decoder_projector = Linear(hidden, hidden, True)

    def forward(self, op, token_ids, hidden_state, cell_state):
        x = self.embedding(op, token_ids)  # [batch, hidden]
        x, hidden_state, cell_state = self.lstm(op, x, hidden_state, cell_state)
        return self.decoder_projector(op, x), hidden_state, cell_state


class JointNetwork(nn.Module):
    """``head(activation(encoder + decoder))``: token logits, then any duration logits."""

    def __init__(self, hidden: int, outputs: int, activation: str) -> None:
        super().__init__()
        self.head = Linear(hidden, outputs, True)
        self.act = get_activation(activation)

    def forward(self, op, encoder_states, decoder_states):
        return self.head(op, self.act(op, op.Add(encoder_states, decoder_states)))


class ParakeetForRNNT(ParakeetEncoderModel):
    """The encoder, ``encoder_projector``, ``decoder`` and ``joint`` (the ``transducer`` hooks)."""

    config_class = ParakeetTransducerConfig
    task = "transducer"

    def __init__(self, config: ParakeetTransducerConfig) -> None:
        super().__init__(config)
        hidden = config.decoder_hidden_size
        self.encoder_projector = Linear(config.hidden_size, hidden, True)
        self.decoder = PredictionNetwork(config.vocab_size, hidden, config.num_decoder_layers)
        outputs = config.vocab_size + len(config.durations)
        self.joint = JointNetwork(hidden, outputs, config.joint_activation)

    def encode(self, op, input_features, attention_mask):
        """``encoder_hidden_states [batch, frames', decoder_hidden]`` and ``encoder_lengths [batch]``."""
        hidden, frame_mask = self.encoder(op, input_features, attention_mask)
        lengths = op.ReduceSum(op.Cast(frame_mask, to=ir.DataType.INT64), [1], keepdims=0)
        return self.encoder_projector(op, hidden), lengths

    def decode_step(self, op, token_ids, hidden_state, cell_state):
        """The prediction network on one token per row: its output and the new LSTM state."""
        return self.decoder(op, token_ids, hidden_state, cell_state)

    def joint_logits(self, op, encoder_states, decoder_states) -> dict[str, ir.Value]:
        """``token_logits`` and, for TDT, ``duration_logits``, for one frame per row."""
        logits = self.joint(op, encoder_states, decoder_states)
        if not self.config.durations:
            return {"token_logits": logits}
        vocab = self.config.vocab_size
        return {
            "token_logits": op.Slice(logits, [0], [vocab], [-1]),
            "duration_logits": op.Slice(
                logits, [vocab], [vocab + len(self.config.durations)], [-1]
            ),
        }

    def sanitize(self, weights: dict) -> dict:
        """The checkpoint's names are the module tree's (no bare-encoder prefixing)."""
        return weights


class ParakeetForTDT(ParakeetForRNNT):
    """RNN-T with the duration head: the joint's ``durations`` extra logits (set by the config)."""


MODEL_TYPES = {"parakeet_rnnt": ParakeetForRNNT, "parakeet_tdt": ParakeetForTDT}
