"""X-Codec: DAC's acoustic encoder/decoder and a HuBERT (or WavLM) semantic encoder over one residual VQ.

The module tree follows ``XcodecModel`` checkpoints: ``acoustic_encoder.*`` /
``acoustic_decoder.*`` (DAC's, :mod:`mobius_audio.models.dac`), ``semantic_model.*``
(the wav2vec2-family encoder, :mod:`mobius_audio.models.wav2vec2`),
``encoder_semantic.*`` (ELU residual conv blocks), ``fc`` (the fused features),
``quantizer.quantizers.{i}.codebook.embed`` (Euclidean stages, EnCodec's) and
``fc2`` (the quantized sum back to the acoustic width).

Encoding (``input_values`` ``[batch, 1, samples]``): the semantic model runs on
the clip zero-padded by ``hop_length // 2`` each side, without an attention mask,
and its hidden states (the input of the first layer and every layer's output) are
averaged; ``encoder_semantic`` turns them into ``[batch, hidden, frames]``. The
acoustic encoder runs on the clip as it is when its frame count equals the
semantic one, else on the clip padded as the semantic model's input was
(transformers' rule, decided in the graph from the clip's length). The two are
concatenated on channels, go through ``fc`` and the residual quantizer.

Decoding: the chosen rows summed, ``fc2``, and DAC's decoder as X-Codec changes
it: each transposed conv keeps ``stride % 2`` more samples (torch's
``output_padding``) and there is no final ``tanh``.

Not in the graph (unused by transformers' ``encode``/``decode``): ``fc1``,
``decoder_semantic`` and the codebooks' training state. The audio codec contract
is :mod:`mobius_audio.tasks_codec`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import positive_int
from mobius_audio.models._codec import CodecConv1d, CodecConvTranspose1d, fold_weight_norm
from mobius_audio.models.dac import DacConfig, DacDecoder, DacDecoderBlock, DacEncoder
from mobius_audio.models.encodec import EncodecResidualVectorQuantizer
from mobius_audio.models.hubert import HubertForCTC
from mobius_audio.models.wav2vec2 import Wav2Vec2Config
from mobius_audio.models.wavlm import WavLMForCTC

#: The semantic models transformers' X-Codec takes: their config and module classes.
SEMANTIC_MODELS = {"hubert": HubertForCTC, "wavlm": WavLMForCTC}


def _ints(hf_config: Any, name: str, minimum: int = 1) -> tuple[int, ...]:
    values = getattr(hf_config, name, None)
    if (
        not isinstance(values, (list, tuple))
        or not values
        or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in values)
    ):
        raise ConfigError(f"xcodec {name} must list integers >= {minimum}, got {values!r}")
    return tuple(values)


def _sub_config(hf_config: Any, name: str, allowed) -> Any:
    sub = getattr(hf_config, name, None)
    model_type = getattr(sub, "model_type", None)
    if model_type not in allowed:
        raise ConfigError(f"xcodec {name} is a {model_type!r} model; built: {', '.join(allowed)}")
    return sub


@dataclass
class XcodecConfig:
    model_type: str
    acoustic: DacConfig
    semantic: Wav2Vec2Config
    kernel_size: int
    channel_ratios: tuple[float, ...]
    strides: tuple[int, ...]
    block_dilations: tuple[int, ...]
    unit_kernel_size: int
    codebook_size: int
    codebook_dim: int
    n_codebooks: int
    sampling_rate: int

    @property
    def hop_length(self) -> int:
        return self.acoustic.hop_length

    @property
    def channels(self) -> int:
        return 1  # X-Codec is mono

    @property
    def hidden_size(self) -> int:
        """The fused features' channels: acoustic then semantic."""
        return self.acoustic.hidden_size + self.semantic.hidden_size

    @property
    def semantic_widths(self) -> list[int]:
        """The channels after each semantic encoder block."""
        return [int(self.semantic.hidden_size * ratio) for ratio in self.channel_ratios]

    @classmethod
    def from_hf(cls, hf_config: Any) -> XcodecConfig:
        acoustic = _sub_config(hf_config, "acoustic_model_config", ("dac",))
        semantic = _sub_config(hf_config, "semantic_model_config", tuple(SEMANTIC_MODELS))
        if semantic.do_stable_layer_norm:
            raise ConfigError("xcodec: a semantic model with do_stable_layer_norm is not built")
        strides = _ints(hf_config, "strides")
        ratios = getattr(hf_config, "channel_ratios", None)
        if (
            not isinstance(ratios, (list, tuple))
            or len(ratios) != len(strides)
            or any(isinstance(r, bool) or not isinstance(r, (int, float)) or r <= 0 for r in ratios)
        ):
            raise ConfigError(
                f"xcodec channel_ratios must list one positive ratio per stride, got {ratios!r}"
            )
        dac = DacConfig.from_hf(acoustic)
        semantic_config = SEMANTIC_MODELS[semantic.model_type].config_class.from_hf(semantic)
        if int(semantic_config.hidden_size * ratios[-1]) != semantic_config.hidden_size:
            raise ConfigError(
                f"xcodec channel_ratios {list(ratios)} must end at the semantic width (1)"
            )
        codebook_size = positive_int(hf_config, "codebook_size")
        codebook_dim = positive_int(hf_config, "codebook_dim")
        if codebook_dim != dac.hidden_size + semantic_config.hidden_size:
            raise ConfigError(
                f"xcodec codebook_dim {codebook_dim} must be the fused width "
                f"{dac.hidden_size} + {semantic_config.hidden_size}"
            )
        rate = positive_int(hf_config, "sample_rate")
        return cls(
            model_type="xcodec",
            acoustic=dac,
            semantic=semantic_config,
            kernel_size=positive_int(hf_config, "kernel_size"),
            channel_ratios=tuple(ratios),
            strides=strides,
            block_dilations=_ints(hf_config, "block_dilations"),
            unit_kernel_size=positive_int(hf_config, "unit_kernel_size"),
            codebook_size=codebook_size,
            codebook_dim=codebook_dim,
            n_codebooks=_stages(hf_config, codebook_size, math.ceil(rate / dac.hop_length)),
            sampling_rate=rate,
        )


def _stages(hf_config: Any, codebook_size: int, frame_rate: int) -> int:
    """The stages transformers' ``encode`` uses at its default (largest) bandwidth."""
    bandwidths = getattr(hf_config, "target_bandwidths", None)
    if (
        not isinstance(bandwidths, (list, tuple))
        or not bandwidths
        or any(isinstance(b, bool) or not isinstance(b, (int, float)) or b <= 0 for b in bandwidths)
    ):
        raise ConfigError(f"xcodec target_bandwidths must list kbps, got {bandwidths!r}")
    bits = math.ceil(math.log2(codebook_size)) if codebook_size > 1 else 0
    built = int(1000 * bandwidths[-1] // (frame_rate * bits)) if bits else 0  # the quantizers
    if built < 1:
        raise ConfigError(
            f"xcodec target_bandwidths {list(bandwidths)} leave no codebook at "
            f"{frame_rate} frames/s of {codebook_size} rows"
        )
    per_stage = math.log2(codebook_size) * frame_rate / 1000
    return min(built, int(max(1, math.floor(bandwidths[-1] / per_stage))))


class _Elu(nn.Module):
    def forward(self, op, x):
        return op.Elu(x, alpha=1.0)


class XcodecResidualUnit(nn.Module):
    """ELU, a dilated conv, ELU, a 1x1 conv (both without bias); added to the input."""

    def __init__(self, config: XcodecConfig, channels: int, dilation: int) -> None:
        super().__init__()
        kernel = config.unit_kernel_size
        pad = (kernel - 1) // 2 * dilation
        self.conv1 = CodecConv1d(channels, channels, kernel, dilation=dilation, pad=pad, bias=False)
        self.conv2 = CodecConv1d(channels, channels, 1, bias=False)
        self.activation = _Elu()

    def forward(self, op, x):
        y = self.conv2(op, self.activation(op, self.conv1(op, self.activation(op, x))))
        return op.Add(x, y)


class XcodecSemanticEncoderBlock(nn.Module):
    def __init__(self, config: XcodecConfig, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.res_units = nn.ModuleList(
            [XcodecResidualUnit(config, cin, d) for d in config.block_dilations]
        )
        kernel = 3 if stride == 1 else 2 * stride
        self.conv = CodecConv1d(cin, cout, kernel, stride=stride, pad=(kernel - 1) // 2)

    def forward(self, op, x):
        for unit in self.res_units:
            x = unit(op, x)
        return self.conv(op, x)


class SemanticEncoder(nn.Module):
    def __init__(self, config: XcodecConfig) -> None:
        super().__init__()
        width, kernel = config.semantic.hidden_size, config.kernel_size
        self.conv = CodecConv1d(width, width, kernel, pad=kernel // 2, bias=False)
        widths = [width, *config.semantic_widths]
        self.conv_blocks = nn.ModuleList(
            [
                XcodecSemanticEncoderBlock(config, widths[i], widths[i + 1], stride)
                for i, stride in enumerate(config.strides)
            ]
        )

    def forward(self, op, x):
        x = self.conv(op, x)
        for block in self.conv_blocks:
            x = block(op, x)
        return x


class XcodecDecoderBlock(DacDecoderBlock):
    """DAC's block whose transposed conv keeps ``stride % 2`` more samples on the right."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__(cin, cout, stride)
        crop = math.ceil(stride / 2)
        pads = (crop, crop - stride % 2)  # torch's output_padding: a shorter right crop
        self.conv_t1 = CodecConvTranspose1d(cin, cout, 2 * stride, stride=stride, pads=pads)


class XcodecAcousticDecoder(DacDecoder):
    block_class = XcodecDecoderBlock

    def activation(self, op, x):
        """X-Codec drops DAC's final ``tanh``."""
        return x


def _conv_output_length(op, length, conv: CodecConv1d):
    """torch's ``Conv1d`` output length of an int64 ``[1]`` input length."""
    span = conv.dilation * (conv.kernel - 1) + 1
    shrink = op.Constant(value_ints=[span - 2 * conv.pad])
    stride = op.Constant(value_ints=[conv.stride])
    return op.Add(op.Div(op.Sub(length, shrink), stride), op.Constant(value_ints=[1]))


class XcodecResidualVectorQuantization(EncodecResidualVectorQuantizer):
    stages_name = "quantizers"


class XcodecModel(Model):
    """The audio-codec hooks: ``encode(op, input_values)``, ``decode(op, audio_codes)``."""

    config_class = XcodecConfig
    task = "audio-codec"
    ignored = (
        "fc1.*",  # to the semantic width: used in training only
        "decoder_semantic.*",
        "semantic_model.masked_spec_embed",
        "quantizer.quantizers.*.codebook.inited",
        "quantizer.quantizers.*.codebook.cluster_size",
        "quantizer.quantizers.*.codebook.embed_avg",
    )

    def __init__(self, config: XcodecConfig) -> None:
        super().__init__()
        self.config = config
        self.acoustic_encoder = DacEncoder(config.acoustic)
        self.acoustic_decoder = XcodecAcousticDecoder(config.acoustic)
        self.semantic_model = SEMANTIC_MODELS[config.semantic.model_type].model_class(
            config.semantic
        )
        self.encoder_semantic = SemanticEncoder(config)
        self.fc = Linear(config.hidden_size, config.hidden_size, bias=True)
        self.fc2 = Linear(config.hidden_size, config.acoustic.hidden_size, bias=True)
        self.quantizer = XcodecResidualVectorQuantization(config)

    def _padded(self, op, input_values, pad):
        """``input_values`` with ``pad`` (int64 ``[1]``) zeros on both sides of the time axis."""
        zero = op.Constant(value_ints=[0])
        pads = op.Concat(zero, pad, axis=0)
        return op.Pad(
            input_values, op.Concat(pads, pads, axis=0), None, op.Constant(value_ints=[0, 2])
        )

    def _semantic_features(self, op, input_values):
        """``[batch, semantic hidden, frames]``: the mean hidden state, through ``encoder_semantic``."""
        pad = op.Constant(value_ints=[self.config.hop_length // 2])
        samples = op.Squeeze(self._padded(op, input_values, pad), [1])  # [batch, padded]
        every_sample = op.ConstantOfShape(
            op.Shape(samples), value=ir.tensor(np.array([1], dtype=np.int64))
        )
        _, states, _ = self.semantic_model(op, samples, every_sample)
        stacked = op.Concat(*[op.Unsqueeze(s, [0]) for s in states], axis=0)
        mean = op.ReduceMean(stacked, [0], keepdims=0)  # [batch, frames, hidden]
        return self.encoder_semantic(op, op.Transpose(mean, perm=[0, 2, 1]))

    def _acoustic_features(self, op, input_values, frames):
        """The acoustic encoder's ``[batch, hidden, frames]``: the clip padded by ``hop // 2``
        each side when, unpadded, it would not give the semantic ``frames`` (int64 ``[1]``)."""
        length = op.Shape(input_values, start=2, end=3)
        for module in self.acoustic_encoder.modules():
            if isinstance(module, CodecConv1d):
                length = _conv_output_length(op, length, module)
        pad = op.Where(
            op.Equal(length, frames),
            op.Constant(value_ints=[0]),
            op.Constant(value_ints=[self.config.hop_length // 2]),
        )
        return self.acoustic_encoder(op, self._padded(op, input_values, pad))

    def encode(self, op, input_values):
        """``[batch, 1, samples]`` -> int64 ``[batch, n_codebooks, frames]``."""
        semantic = self._semantic_features(op, input_values)
        acoustic = self._acoustic_features(op, input_values, op.Shape(semantic, start=2, end=3))
        fused = op.Transpose(op.Concat(acoustic, semantic, axis=1), perm=[0, 2, 1])
        embeddings = op.Transpose(self.fc(op, fused), perm=[0, 2, 1])
        return self.quantizer(op, embeddings)

    def decode(self, op, audio_codes):
        """``[batch, K, frames]`` (``K <= n_codebooks``) -> ``[batch, 1, samples]``."""
        quantized = op.Transpose(self.quantizer(op, audio_codes=audio_codes), perm=[0, 2, 1])
        acoustic = op.Transpose(self.fc2(op, quantized), perm=[0, 2, 1])
        return self.acoustic_decoder(op, acoustic)

    def sanitize(self, weights: dict) -> dict:
        """The acoustic convolutions' weight norm folded; the semantic model's positional conv
        keeps its norm (over the kernel taps) under wav2vec2's ``weight_g``/``weight_v``."""
        acoustic = {k: v for k, v in weights.items() if k.startswith("acoustic_")}
        out = {k: v for k, v in weights.items() if not k.startswith("acoustic_")}
        for key in [k for k in out if k.startswith("semantic_model.")]:
            renamed = key.replace("parametrizations.weight.original0", "weight_g")
            out[renamed.replace("parametrizations.weight.original1", "weight_v")] = out.pop(key)
        return {**out, **fold_weight_norm(acoustic)}


MODEL_TYPES = {"xcodec": XcodecModel}
