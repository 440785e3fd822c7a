"""SEW: wav2vec2 whose transformer runs on a squeezed sequence.

The conv features are layer-normalised (and projected when ``conv_dim[-1]`` is not
``hidden_size``); the encoder average-pools the frames by ``squeeze_factor``, adds a
position conv of the same stride, runs post-LN wav2vec2 layers on the pooled frames,
and upsamples back (a Linear to ``squeeze_factor * hidden``, its channels unfolded
into frames), zero-padding the last ``frames % squeeze_factor`` frames. The frame
mask is max-pooled the same way, so a pooled frame is real when any of its frames is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_audio.models.wav2vec2 import (
    UTTERANCE_HEADS,
    Wav2Vec2Config,
    Wav2Vec2Encoder,
    Wav2Vec2FeatureEncoder,
    Wav2Vec2ForCTC,
    Wav2Vec2PositionalConvEmbedding,
    WeightNormConv,
    frame_mask,
)


@dataclass
class SEWConfig(Wav2Vec2Config):
    squeeze_factor: int = 2
    feature_layer_norm_eps: float = 1e-5  # the LayerNorm on the conv features

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "add_adapter", False):
            raise ConfigError(f"{hf_config.model_type} adapters (add_adapter) are not built")
        fields = super().hf_fields(hf_config)
        if fields["feat_extract_norm"] not in ("group", "layer"):
            raise ConfigError(f"feat_extract_norm {fields['feat_extract_norm']!r} is not built")
        return dict(
            fields,
            do_stable_layer_norm=False,
            feat_proj_layer_norm=False,
            squeeze_factor=int(hf_config.squeeze_factor),
            feature_layer_norm_eps=hf_config.layer_norm_eps,
        )


class SEWPositionalConvEmbedding(Wav2Vec2PositionalConvEmbedding):
    """The wav2vec2 position conv with stride ``squeeze_factor``: one embedding per pooled frame."""

    def __init__(self, config: SEWConfig) -> None:
        super().__init__(config)
        self.conv = WeightNormConv(
            config.hidden_size,
            config.num_conv_pos_embeddings,
            config.num_conv_pos_embedding_groups,
            stride=config.squeeze_factor,
        )


class SEWUpsampling(nn.Module):
    """``act(projection(x))`` ``[b, n, s*d]`` unfolded to ``[b, n*s, d]``, zero-padded to ``frames``."""

    def __init__(self, config: SEWConfig) -> None:
        super().__init__()
        d, self.factor = config.hidden_size, config.squeeze_factor
        self.projection = Linear(d, d * self.factor, bias=True)
        self.act = get_activation(config.feat_extract_activation)
        self.hidden_size = d

    def forward(self, op, x, frames):
        x = op.Reshape(self.act(op, self.projection(op, x)), [0, -1, self.hidden_size])
        missing = op.Sub(frames, op.Shape(x, start=1, end=2))  # [1]: frames % factor
        pads = op.Concat([0, 0, 0, 0], missing, [0], axis=0)
        return op.Pad(x, pads)


def squeeze(op, x, mask, pos_conv_embed, factor: int):
    """Pads zeroed, frames average-pooled by ``factor`` plus the strided position conv.

    ``x`` [batch, frames, hidden], ``mask`` bool [batch, frames] -> ``[batch, frames // factor,
    hidden]`` and its mask (a pooled frame is real when any of its frames is: max-pooled).
    """
    zero = op.CastLike(op.Constant(value=ir.tensor(np.array(0, dtype=np.float32))), x)
    x = op.Where(op.Unsqueeze(mask, [2]), x, zero)
    pooled = op.AveragePool(
        op.Transpose(x, perm=[0, 2, 1]), kernel_shape=[factor], strides=[factor]
    )  # [b, d, frames // factor]
    pooled = op.Transpose(pooled, perm=[0, 2, 1])
    count = op.Shape(pooled, start=1, end=2)
    # the conv gives ceil(frames / factor) embeddings (odd kernel): keep the pooled count
    pos = op.Slice(pos_conv_embed(op, x), [0], count, [1])
    real = op.MaxPool(
        op.Unsqueeze(op.Cast(mask, to=ir.DataType.FLOAT), [1]),
        kernel_shape=[factor],
        strides=[factor],
    )
    return op.Add(pooled, pos), op.Cast(op.Squeeze(real, [1]), to=ir.DataType.BOOL)


class SEWEncoder(Wav2Vec2Encoder):
    """Squeeze, LayerNorm, post-LN wav2vec2 layers, upsample; states at the squeezed length."""

    pos_conv_class = SEWPositionalConvEmbedding

    def __init__(self, config: SEWConfig) -> None:
        super().__init__(config)
        self.upsample = SEWUpsampling(config)
        self.factor = config.squeeze_factor

    def forward(self, op, x, frame_mask):
        frames = op.Shape(x, start=1, end=2)
        x, mask = squeeze(op, x, frame_mask, self.pos_conv_embed, self.factor)
        bias = self.attention_bias(op, x, mask)
        x = self.layer_norm(op, x)
        states = [x]  # as transformers records them: squeezed, before upsampling
        for layer in self.layers:
            x = layer(op, x, bias)
            states.append(x)
        return self.upsample(op, x, frames), states


class SEWModel(nn.Module):
    """The wav2vec2 conv features, ``layer_norm``, an optional ``feature_projection``, the encoder."""

    encoder_class = SEWEncoder

    def __init__(self, config: SEWConfig) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = Wav2Vec2FeatureEncoder(config)
        self.layer_norm = LayerNorm(config.conv_dim[-1], config.feature_layer_norm_eps)
        self.feature_projection = None
        if config.conv_dim[-1] != config.hidden_size:
            self.feature_projection = Linear(config.conv_dim[-1], config.hidden_size, bias=True)
        self.encoder = self.encoder_class(config)

    def forward(self, op, input_values, attention_mask):
        x = self.layer_norm(op, self.feature_extractor(op, input_values))  # [b, frames, conv]
        mask = frame_mask(op, attention_mask, self.config, op.Shape(x, start=1, end=2))
        if self.feature_projection is not None:
            x = self.feature_projection(op, x)
        hidden, states = self.encoder(op, x, mask)
        return hidden, states, mask


class SEWForCTC(Wav2Vec2ForCTC):
    config_class = SEWConfig
    base_model_prefix = "sew"
    heads = UTTERANCE_HEADS
    model_class = SEWModel

    def classify(self, op, hidden, states, mask):
        """As wav2vec2; the weighted layer sum is squeezed, and transformers masks it with
        the first ``frames // squeeze_factor`` entries of the full-rate frame mask."""
        if self.layer_weights is not None:
            mask = op.Slice(mask, [0], op.Shape(states[0], start=1, end=2), [1])
        return super().classify(op, hidden, states, mask)


MODEL_TYPES = {"sew": SEWForCTC}
