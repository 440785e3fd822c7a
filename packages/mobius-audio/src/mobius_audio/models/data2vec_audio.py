"""Data2Vec-Audio: wav2vec2 with LayerNorm on every conv and a stack of plain position convs.

The position embedding is ``num_conv_pos_embeddings`` layers of grouped Conv1d
(kernel ``conv_pos_kernel_size``, no weight norm), a LayerNorm without weights
and the activation; the encoder layers are post-LN as in wav2vec2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import get_activation
from mobius_audio.models.wav2vec2 import (
    Conv1d,
    Wav2Vec2Config,
    Wav2Vec2Encoder,
    Wav2Vec2ForCTC,
    Wav2Vec2Model,
)


@dataclass
class Data2VecAudioConfig(Wav2Vec2Config):
    conv_pos_kernel_size: int = 19

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        return dict(
            fields,
            feat_extract_norm="layer",
            do_stable_layer_norm=False,
            conv_pos_kernel_size=hf_config.conv_pos_kernel_size,
        )


class Data2VecAudioPositionalConvLayer(nn.Module):
    def __init__(self, config: Data2VecAudioConfig) -> None:
        super().__init__()
        k, d = config.conv_pos_kernel_size, config.hidden_size
        self.conv = Conv1d(d, d, k, pad=k // 2, groups=config.num_conv_pos_embedding_groups)
        self.trim = k % 2 == 0
        self.act = get_activation(config.feat_extract_activation)
        self.hidden_size = d

    def forward(self, op, x):  # [batch, hidden, frames]
        y = self.conv(op, x)
        if self.trim:
            y = op.Slice(y, [0], [-1], [2])
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.hidden_size, np.float32))), y)
        # LayerNorm over the channels, weightless (elementwise_affine=False, eps 1e-5)
        y = op.Transpose(
            op.LayerNormalization(op.Transpose(y, perm=[0, 2, 1]), ones, axis=-1, epsilon=1e-5),
            perm=[0, 2, 1],
        )
        return self.act(op, y)


class Data2VecAudioPositionalConvEmbedding(nn.Module):
    def __init__(self, config: Data2VecAudioConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [
                Data2VecAudioPositionalConvLayer(config)
                for _ in range(config.num_conv_pos_embeddings)
            ]
        )

    def forward(self, op, x):  # [batch, frames, hidden]
        x = op.Transpose(x, perm=[0, 2, 1])
        for layer in self.layers:
            x = layer(op, x)
        return op.Transpose(x, perm=[0, 2, 1])


class Data2VecAudioEncoder(Wav2Vec2Encoder):
    pos_conv_class = Data2VecAudioPositionalConvEmbedding


class Data2VecAudioModel(Wav2Vec2Model):
    encoder_class = Data2VecAudioEncoder


class Data2VecAudioForCTC(Wav2Vec2ForCTC):
    config_class = Data2VecAudioConfig
    base_model_prefix = "data2vec_audio"
    model_class = Data2VecAudioModel


MODEL_TYPES = {"data2vec-audio": Data2VecAudioForCTC}
