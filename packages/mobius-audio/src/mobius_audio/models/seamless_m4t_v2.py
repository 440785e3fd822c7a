"""SeamlessM4T v2 speech-to-text: v1's model with Wav2Vec2-BERT's conformer blocks and chunked attention.

What changes from :mod:`mobius_audio.models.seamless_m4t`: the blocks' attention
takes ``relative_key`` positions (a learned embedding of the key - query distance
clamped to ``[-left_max_position_embeddings, right_max_position_embeddings]``) or
none; the conv module's depthwise conv is causal (left-padded) and followed by a
LayerNorm (1e-5) instead of BatchNorm. With ``speech_encoder_chunk_size`` set, a
frame attends only to the real frames of its own chunk and of the
``speech_encoder_left_chunk_num`` chunks before it (every earlier chunk when that
is negative). A padded frame whose window holds no real frame at all is left to
ONNX Runtime's attention (transformers' is undefined there); real checkpoints'
chunks (20000 frames, 128 to the left) never make one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx_ir as ir

from mobius.components import lowest_value
from mobius.errors import ConfigError
from mobius_audio.models.seamless_m4t import (
    BLOCK_NORM_EPS,
    SeamlessM4TConfig,
    SeamlessM4TConformerEncoder,
    SeamlessM4TForSpeechToText,
    SeamlessM4TSpeechEncoder,
    config_int,
)
from mobius_audio.models.wav2vec2_bert import (
    Wav2Vec2BertConvolutionModule,
    Wav2Vec2BertSelfAttention,
)
from mobius_audio.models.wav2vec2_conformer import Wav2Vec2ConformerEncoderLayer


@dataclass
class SeamlessM4Tv2Config(SeamlessM4TConfig):
    built_positions = (None, "relative_key")

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        chunk = hf.speech_encoder_chunk_size
        left = hf.speech_encoder_left_chunk_num
        if not isinstance(left, int) or isinstance(left, bool):
            raise ConfigError(
                f"{hf.model_type}: speech_encoder_left_chunk_num={left!r} must be an integer"
            )
        return dict(
            super().hf_fields(hf),
            left_max_position_embeddings=config_int(hf, "left_max_position_embeddings", 0),
            right_max_position_embeddings=config_int(hf, "right_max_position_embeddings", 0),
            chunk_size=None if chunk is None else config_int(hf, "speech_encoder_chunk_size", 1),
            left_chunk_num=left,
        )


class SeamlessM4Tv2ConformerConvolutionModule(Wav2Vec2BertConvolutionModule):
    def build_depthwise(self, config: SeamlessM4Tv2Config) -> None:
        # Wav2Vec2-BERT's causal conv and its LayerNorm, whose eps here is the blocks' 1e-5
        super().build_depthwise(replace(config, layer_norm_eps=BLOCK_NORM_EPS))


class SeamlessM4Tv2ConformerEncoderLayer(Wav2Vec2ConformerEncoderLayer):
    attention_class = Wav2Vec2BertSelfAttention
    conv_module_class = SeamlessM4Tv2ConformerConvolutionModule


def chunk_window(op, x, chunk: int, left_chunks: int):
    """bool ``[frames(q), frames(k)]``: key ``k`` lies in query ``q``'s chunk or the ``left_chunks`` before it."""
    frames = op.Squeeze(op.Shape(x, start=1, end=2), [0])
    index = op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1))
    chunk_of = op.Div(index, op.Constant(value_int=chunk))
    if left_chunks < 0:  # every earlier chunk
        start = op.Mul(index, 0)
    else:
        first = op.Max(op.Sub(chunk_of, left_chunks), op.Constant(value_int=0))
        start = op.Mul(first, chunk)
    end = op.Min(op.Mul(op.Add(chunk_of, 1), chunk), frames)
    keys = op.Unsqueeze(index, [0])
    return op.And(
        op.GreaterOrEqual(keys, op.Unsqueeze(start, [1])), op.Less(keys, op.Unsqueeze(end, [1]))
    )


class SeamlessM4Tv2ConformerEncoder(SeamlessM4TConformerEncoder):
    layer_class = SeamlessM4Tv2ConformerEncoderLayer
    inv_freq_saved = False

    def __init__(self, config: SeamlessM4Tv2Config) -> None:
        super().__init__(config)
        self.chunk_size, self.left_chunk_num = config.chunk_size, config.left_chunk_num

    def attention_bias(self, op, x, frame_mask):
        if self.chunk_size is None:
            return super().attention_bias(op, x, frame_mask)
        window = chunk_window(op, x, self.chunk_size, self.left_chunk_num)
        allowed = op.And(op.Unsqueeze(frame_mask, [1, 2]), op.Unsqueeze(window, [0, 1]))
        dtype = x.dtype or ir.DataType.FLOAT
        numpy_dtype = ir.DataType(dtype).numpy()
        zero = op.Constant(value=ir.tensor(np.array(0, numpy_dtype)))
        lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), numpy_dtype)))
        return op.Where(allowed, zero, lowest)  # [batch, 1, frames, frames]


class SeamlessM4Tv2SpeechEncoder(SeamlessM4TSpeechEncoder):
    encoder_class = SeamlessM4Tv2ConformerEncoder


class SeamlessM4Tv2ForSpeechToText(SeamlessM4TForSpeechToText):
    #: ``--validate``'s reference attention: with chunked attention (every real checkpoint),
    #: transformers 5.24's eager path adds the boolean chunk mask to the scores instead of
    #: masking; SDPA, its default, masks.
    reference_attention = "sdpa"

    config_class = SeamlessM4Tv2Config
    speech_encoder_class = SeamlessM4Tv2SpeechEncoder
    ignored = SeamlessM4TForSpeechToText.ignored[:-1]  # no BatchNorm


MODEL_TYPES = {"seamless_m4t_v2": SeamlessM4Tv2ForSpeechToText}
