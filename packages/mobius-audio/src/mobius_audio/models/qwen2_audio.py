"""Qwen2-Audio: Whisper's encoder under a key mask, pooled in pairs, a linear projector, Qwen2.

transformers' ``Qwen2AudioEncoder`` is Whisper's encoder (two convolutions, the second
of stride 2, the learned position table, pre-norm layers whose key projection has no
bias) over the extractor's whole window, whose layers attend only to each clip's real
states: ``(frames - 1) // 2 + 1`` of them for ``frames`` real feature frames (the
``feature_attention_mask``). The states are then averaged in pairs (``AvgPool1d(2, 2)``),
normalised by ``layer_norm``, and each clip keeps its first ``states // 2`` tokens
(transformers' ``(states - 2) // 2 + 1``), which ``multi_modal_projector.linear`` maps
to the text decoder's width. The text decoder is whatever mobius registers for
``text_config.model_type`` (Qwen2).

Checkpoints: the hub's layout (``audio_tower.*``, ``multi_modal_projector.*``,
``language_model.model.*``, ``language_model.lm_head.*``: Qwen/Qwen2-Audio-7B,
Qwen/Qwen2-Audio-7B-Instruct) and the one transformers 5 saves (``model.audio_tower.*``,
``model.language_model.*``, ``lm_head.*``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius_audio.models._audio_lm import (
    AudioLanguageConfig,
    AudioLanguageModel,
    WhisperTowerConfig,
)
from mobius_audio.models.whisper import Conv1d, PositionTable, WhisperEncoderLayer

INT64 = ir.DataType.INT64


class MaskedEncoderLayer(WhisperEncoderLayer):
    """Whisper's encoder layer, its self-attention under a key mask."""

    def forward(self, op, x, mask):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x), mask))
        return op.Add(x, self.mlp(op, x))


def _int(op, value: int):
    return op.Constant(value=ir.tensor(np.array(value, np.int64)))


def first_of_each_row(op, count, width):
    """``[rows, width]`` bool: True for each row's first ``count[row]`` positions."""
    index = op.Range(_int(op, 0), op.Squeeze(width, [0]), _int(op, 1))
    return op.Less(op.Unsqueeze(index, [0]), op.Unsqueeze(count, [1]))


class Qwen2AudioEncoder(nn.Module):
    """``conv1``, ``conv2``, ``embed_positions``, ``layers``, ``layer_norm`` (module docstring)."""

    def __init__(self, config: WhisperTowerConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.conv1 = Conv1d(config.num_mel_bins, d, 3)
        self.conv2 = Conv1d(d, d, 3, stride=2)
        self.embed_positions = PositionTable(config.max_source_positions, d)
        self.layers = nn.ModuleList(
            [
                MaskedEncoderLayer(config, config.encoder_heads, config.encoder_ffn_dim)
                for _ in range(config.encoder_layers)
            ]
        )
        self.layer_norm = LayerNorm(d, 1e-5)

    def forward(self, op, input_features, feature_attention_mask):
        """``[audio tokens, d_model]``: each clip's real tokens, clip after clip."""
        frames = op.ReduceSum(op.Cast(feature_attention_mask, to=INT64), [1], keepdims=0)
        states = op.Add(op.Div(op.Sub(frames, _int(op, 1)), _int(op, 2)), _int(op, 1))
        x = op.Gelu(self.conv1(op, input_features))
        x = op.Gelu(self.conv2(op, x))  # [clips, d, frames / 2]
        x = op.Transpose(x, perm=[0, 2, 1])
        width = op.Shape(x, start=1, end=2)
        x = op.Add(x, self.embed_positions(op, op.Constant(value_ints=[0]), width))
        # every query attends to its clip's real states only (padding queries are dropped)
        keys = op.Unsqueeze(first_of_each_row(op, states, width), [1, 2])  # [clips, 1, 1, S]
        # ONNX Runtime wants the mask's query axis whole: [clips, 1, S, S]
        shape = op.Concat(
            op.Shape(x, start=0, end=1), op.Constant(value_ints=[1]), width, width, axis=0
        )
        mask = op.Expand(keys, shape)
        for layer in self.layers:
            x = layer(op, x, mask)
        pooled = op.AveragePool(op.Transpose(x, perm=[0, 2, 1]), kernel_shape=[2], strides=[2])
        x = self.layer_norm(op, op.Transpose(pooled, perm=[0, 2, 1]))  # [clips, tokens, d]
        tokens = op.Div(states, _int(op, 2))  # transformers' (states - 2) // 2 + 1
        keep = first_of_each_row(op, tokens, op.Shape(x, start=1, end=2))
        return op.GatherND(x, op.Transpose(op.NonZero(keep), perm=[1, 0]))


class Qwen2AudioMultiModalProjector(nn.Module):
    def __init__(self, audio_width: int, text_width: int) -> None:
        super().__init__()
        self.linear = Linear(audio_width, text_width, bias=True)

    def forward(self, op, x):
        return self.linear(op, x)


@dataclass
class Qwen2AudioConfig(AudioLanguageConfig):
    audio_config_class = WhisperTowerConfig


class Qwen2AudioForConditionalGeneration(AudioLanguageModel):
    config_class = Qwen2AudioConfig

    def make_audio_tower(self, config: Qwen2AudioConfig) -> nn.Module:
        return Qwen2AudioEncoder(config.audio)

    def make_projector(self, config: Qwen2AudioConfig) -> nn.Module:
        return Qwen2AudioMultiModalProjector(config.audio.hidden_size, config.text.hidden_size)

    def audio_features(self, op, input_features, feature_attention_mask):
        return self.multi_modal_projector(
            op, self.audio_tower(op, input_features, feature_attention_mask)
        )


MODEL_TYPES = {"qwen2_audio": Qwen2AudioForConditionalGeneration}
