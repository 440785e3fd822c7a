"""Mimi (Kyutai): EnCodec's SEANet convs, a causal transformer over the latents, split residual codebooks.

Encoder: the SEANet conv stack (EnCodec's, without its LSTM), a transformer over
the frames (pre-norm, rotary, causal within a sliding window, layer scale), a
strided conv that halves the frame rate (``downsample``), then two residual
quantizers over the same latents, each with its own 1x1 projections: the
``num_semantic_quantizers`` semantic stages first, the acoustic stages after. The
decoder mirrors it: the codes' rows summed per quantizer and projected back, a
grouped transposed conv (``upsample``), a second transformer, the SEANet decoder.

The module tree follows the hub checkpoints' flat layout (``encoder.layers.0.conv``,
``encoder_transformer.layers.0.self_attn.q_proj``, ``downsample.conv``,
``quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum``,
``upsample.conv``, ``decoder_transformer...``, ``decoder.layers...``), which is
also what transformers' ``save_pretrained`` writes. A codebook's rows are
``embed_sum / max(cluster_usage, 1e-5)``, as transformers computes them.

Codebook counts: the encoder gives every stage; because the semantic and acoustic
quantizers each quantize the latents sequentially, the first ``K`` stages are
exactly transformers' ``encode(num_quantizers=K)`` for ``K >= num_semantic_quantizers``,
and the decoder takes any ``1 <= K <= num_quantizers``, as ``decode`` does. The
audio codec contract is :mod:`mobius_audio.tasks_codec`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    ACTIVATIONS,
    LayerNorm,
    Linear,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    merge_heads,
)
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import positive_int
from mobius_audio.models._codec import fold_weight_norm, sum_of_codebook_rows
from mobius_audio.models._seanet import (
    PAD_MODES,
    EncodecConv1d,
    EncodecDecoder,
    EncodecEncoder,
    seanet_fields,
)
from mobius_audio.models.encodec import EncodecConfig, EncodecVectorQuantization


@dataclass
class MimiConfig(EncodecConfig):
    """EnCodec's SEANet settings (no LSTM), the transformers' and the split quantizer's."""

    num_semantic_quantizers: int = 1
    quantizer_dim: int = 0  # vector_quantization_hidden_dimension
    latent_stride: int = 2  # frames of the convs per code frame (down/upsampling)
    upsample_groups: int = 1
    num_hidden_layers: int = 1
    intermediate_size: int = 1
    num_attention_heads: int = 1
    num_key_value_heads: int = 1
    head_dim: int = 1
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope: RopeConfig = dataclasses.field(default_factory=RopeConfig)
    max_position_embeddings: int = 8000
    sliding_window: int | None = None
    attention_bias: bool = False

    @property
    def hop_length(self) -> int:
        """Samples per code frame."""
        return math.prod(self.upsampling_ratios) * self.latent_stride

    @property
    def projects(self) -> bool:
        """Whether each quantizer projects the latents to ``quantizer_dim`` and back."""
        return self.quantizer_dim != self.hidden_size

    @classmethod
    def from_hf(cls, hf_config: Any) -> MimiConfig:
        if hf_config.pad_mode not in PAD_MODES:
            raise ConfigError(
                f"mimi pad_mode {hf_config.pad_mode!r} is not one of {list(PAD_MODES)}"
            )
        ratios = hf_config.upsampling_ratios
        if (
            not isinstance(ratios, (list, tuple))
            or not ratios
            or any(isinstance(r, bool) or not isinstance(r, int) or r <= 0 for r in ratios)
        ):
            raise ConfigError(f"mimi upsampling_ratios must be positive integers, got {ratios!r}")
        channels = positive_int(hf_config, "audio_channels")
        if channels > 2:
            raise ConfigError(f"mimi audio_channels {channels}: 1 or 2")
        trim = hf_config.trim_right_ratio
        if isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0 <= trim <= 1:
            raise ConfigError(f"mimi trim_right_ratio {trim!r} is not in [0, 1]")
        if trim != 1 and not hf_config.use_causal_conv:
            raise ConfigError(f"mimi trim_right_ratio {trim!r}: only causal convs trim unevenly")
        hidden = positive_int(hf_config, "hidden_size")
        stages = positive_int(hf_config, "num_quantizers")
        semantic = positive_int(hf_config, "num_semantic_quantizers")
        if semantic >= stages:
            raise ConfigError(
                f"mimi num_semantic_quantizers {semantic} must be below num_quantizers {stages}"
            )
        quantizer_dim = positive_int(hf_config, "vector_quantization_hidden_dimension")
        codebook_dim = positive_int(hf_config, "codebook_dim")
        if codebook_dim != quantizer_dim:
            raise ConfigError(
                f"mimi codebook_dim {codebook_dim} must equal vector_quantization_hidden_dimension "
                f"{quantizer_dim}: the codebooks hold the projected latents"
            )
        heads = positive_int(hf_config, "num_attention_heads")
        kv_heads = positive_int(hf_config, "num_key_value_heads")
        if heads % kv_heads:
            raise ConfigError(
                f"mimi num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )
        window = hf_config.sliding_window
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window <= 0
        ):
            raise ConfigError(
                f"mimi sliding_window must be a positive integer or null, got {window!r}"
            )
        if hf_config.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"mimi hidden_act {hf_config.hidden_act!r} is not known")
        frame_rate, encodec_rate = hf_config.frame_rate, hf_config.encodec_frame_rate
        stride = int(encodec_rate / frame_rate) if frame_rate else 0
        if frame_rate == encodec_rate or stride < 1:
            # transformers then builds no resampling convs, yet its encode and decode call them
            raise ConfigError(
                f"mimi frame_rate {frame_rate} must be below the convs' frame rate {encodec_rate}"
            )
        groups = positive_int(hf_config, "upsample_groups")
        if hidden % groups:
            raise ConfigError(f"mimi upsample_groups {groups} does not divide hidden_size {hidden}")
        eps = hf_config.norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ConfigError(f"mimi norm_eps must be a positive number, got {eps!r}")
        return cls(
            model_type="mimi",
            channels=channels,
            hidden_size=hidden,
            upsampling_ratios=tuple(ratios),
            **seanet_fields(hf_config),
            num_lstm_layers=0,
            trim_right_ratio=float(trim),
            codebook_size=positive_int(hf_config, "codebook_size"),
            codebook_dim=codebook_dim,
            n_codebooks=stages,
            num_semantic_quantizers=semantic,
            quantizer_dim=quantizer_dim,
            latent_stride=stride,
            upsample_groups=groups,
            num_hidden_layers=positive_int(hf_config, "num_hidden_layers"),
            intermediate_size=positive_int(hf_config, "intermediate_size"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=positive_int(hf_config, "head_dim"),
            hidden_act=hf_config.hidden_act,
            norm_eps=float(eps),
            rope=RopeConfig.from_hf(hf_config),
            max_position_embeddings=positive_int(hf_config, "max_position_embeddings"),
            sliding_window=window,
            attention_bias=bool(hf_config.attention_bias),
        )


# --- the transformers over the frames ------------------------------------------------


class MimiAttention(nn.Module):
    """q/k/v/o projections, rotate-half rotary; no cache (the whole clip at once)."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        heads, kv_heads, dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        bias = config.attention_bias
        self.q_proj = Linear(config.hidden_size, heads * dim, bias)
        self.k_proj = Linear(config.hidden_size, kv_heads * dim, bias)
        self.v_proj = Linear(config.hidden_size, kv_heads * dim, bias)
        self.o_proj = Linear(heads * dim, config.hidden_size, bias)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim

    def _split(self, op, x, heads: int):
        """``[batch, seq, heads*dim]`` -> ``[batch, heads, seq, dim]``."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, x, cos, sin, bias):
        q = self._split(op, self.q_proj(op, x), self.heads)
        k = self._split(op, self.k_proj(op, x), self.kv_heads)
        v = self._split(op, self.v_proj(op, x), self.kv_heads)
        q = op.RotaryEmbedding(q, cos, sin, rotary_embedding_dim=self.head_dim)
        k = op.RotaryEmbedding(k, cos, sin, rotary_embedding_dim=self.head_dim)
        y = op.Attention(q, k, v, bias, scale=self.head_dim**-0.5)
        return self.o_proj(op, merge_heads(op, y))


class MimiMLP(nn.Module):
    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = Linear(config.intermediate_size, config.hidden_size)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class MimiLayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter([dim])

    def forward(self, op, x):
        return op.Mul(x, self.scale)


class MimiTransformerLayer(nn.Module):
    """Pre-norm attention and MLP, each residual branch scaled per channel."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = MimiAttention(config)
        self.mlp = MimiMLP(config)
        self.input_layernorm = LayerNorm(d, config.norm_eps)
        self.post_attention_layernorm = LayerNorm(d, config.norm_eps)
        self.self_attn_layer_scale = MimiLayerScale(d)
        self.mlp_layer_scale = MimiLayerScale(d)

    def forward(self, op, x, cos, sin, bias):
        h = self.self_attn(op, self.input_layernorm(op, x), cos, sin, bias)
        x = op.Add(x, self.self_attn_layer_scale(op, h))
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(x, self.mlp_layer_scale(op, h))


class MimiTransformer(nn.Module):
    """The layers over ``[batch, hidden, frames]`` (transposed in and out), positions from 0."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [MimiTransformerLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.rotary = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )
        self.window = config.sliding_window

    def forward(self, op, x):
        x = op.Transpose(x, perm=[0, 2, 1])  # [batch, frames, hidden]
        frames = op.Shape(x, start=1, end=2)
        every = op.ConstantOfShape(
            op.Shape(x, start=0, end=2), value=ir.tensor(np.array([1], np.int64))
        )  # [batch, frames]: no padding, as transformers runs the clip
        positions = op.Expand(
            op.Range(op.Constant(value_int=0), op.Squeeze(frames, [0]), op.Constant(value_int=1)),
            op.Shape(every),
        )
        cos, sin = self.rotary(op, positions)
        bias = attention_bias(op, every, op.Squeeze(frames, [0]), ir.DataType.FLOAT, self.window)
        for layer in self.layers:
            x = layer(op, x, cos, sin, bias)
        return op.Transpose(x, perm=[0, 2, 1])


# --- SEANet stacks and the resampling convs ------------------------------------------


class MimiEncoder(EncodecEncoder):
    """EnCodec's SEANet encoder without the LSTM (the checkpoint's ``encoder.layers`` indices)."""

    def bottleneck(self, config: MimiConfig, dim: int) -> list:
        return []


class MimiDecoder(EncodecDecoder):
    """EnCodec's SEANet decoder without the LSTM (``decoder.layers``)."""

    def bottleneck(self, config: MimiConfig, dim: int) -> list:
        return []


class _BiasFreeConv1d(nn.Module):
    """``nn.Conv1d(bias=False)``: weight ``[cout, cin, kernel]``."""

    def __init__(self, channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, channels, kernel])
        self.kernel, self.stride = kernel, stride

    def forward(self, op, x):
        return op.Conv(x, self.weight, kernel_shape=[self.kernel], strides=[self.stride])


class MimiDownsample(EncodecConv1d):
    """``downsample``: a bias-free conv of stride ``latent_stride``, padded by replicating edges."""

    def __init__(self, config: MimiConfig) -> None:
        stride, d = config.latent_stride, config.hidden_size
        super().__init__(
            dataclasses.replace(config, pad_mode="replicate"), d, d, 2 * stride, stride
        )
        self.conv = _BiasFreeConv1d(d, 2 * stride, stride)


class _GroupedConvTranspose1d(nn.Module):
    """``nn.ConvTranspose1d(groups=g, bias=False)`` (weight ``[cin, cout/g, kernel]``), cropping ``pads``."""

    def __init__(self, channels: int, kernel: int, stride: int, groups: int, pads) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, channels // groups, kernel])
        self.kernel, self.stride, self.groups, self.pads = kernel, stride, groups, list(pads)

    def forward(self, op, x):
        return op.ConvTranspose(
            x, self.weight, kernel_shape=[self.kernel], strides=[self.stride],
            group=self.groups, pads=self.pads,
        )  # fmt: skip


class MimiUpsample(nn.Module):
    """``upsample``: the grouped transposed conv back to the convs' frame rate, trimmed as EnCodec's."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        stride = config.latent_stride
        total = stride  # kernel 2 * stride, minus the stride
        right = math.ceil(total * config.trim_right_ratio) if config.use_causal_conv else total // 2
        self.conv = _GroupedConvTranspose1d(
            config.hidden_size, 2 * stride, stride, config.upsample_groups, (total - right, right)
        )

    def forward(self, op, x):
        return self.conv(op, x)


# --- the split residual quantizer ----------------------------------------------------


class MimiCodebook(nn.Module):
    """``embed_sum / max(cluster_usage, 1e-5)``: the ``[codebook_size, dim]`` rows."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        self.embed_sum = nn.Parameter([config.codebook_size, config.codebook_dim])
        self.cluster_usage = nn.Parameter([config.codebook_size])

    def forward(self, op):
        # in the buffers' type: an f16 build's Max takes no float32 operand
        epsilon = op.CastLike(op.Constant(value_float=1e-5), self.cluster_usage)
        usage = op.Unsqueeze(op.Max(self.cluster_usage, epsilon), [1])
        return op.Div(self.embed_sum, usage)


class MimiVectorQuantization(EncodecVectorQuantization):
    """EnCodec's nearest-row search and lookup over Mimi's codebook."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__(config)
        self.codebook = MimiCodebook(config)


class _Projection(nn.Module):
    """A bias-free 1x1 ``nn.Conv1d``: weight ``[cout, cin, 1]``."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, cin, 1])

    def forward(self, op, x):
        return op.Conv(x, self.weight, kernel_shape=[1])


class MimiResidualVectorQuantizer(nn.Module):
    """``stages`` codebooks quantizing the (projected) latents one residual after another."""

    def __init__(self, config: MimiConfig, stages: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([MimiVectorQuantization(config) for _ in range(stages)])
        if config.projects:
            self.input_proj = _Projection(config.hidden_size, config.quantizer_dim)
            self.output_proj = _Projection(config.quantizer_dim, config.hidden_size)
        else:
            self.input_proj = self.output_proj = None

    def forward(self, op, latents=None, audio_codes=None):
        """Encoding: int64 ``[batch, stages, frames]``. Decoding (``audio_codes`` ``[batch, K,
        frames]``, ``0 <= K <= stages``): the first ``K`` stages' rows summed, projected back."""
        if audio_codes is not None:
            summed = sum_of_codebook_rows(op, [layer(op) for layer in self.layers], audio_codes)
            return summed if self.output_proj is None else self.output_proj(op, summed)
        residual = latents if self.input_proj is None else self.input_proj(op, latents)
        codes = []
        for layer in self.layers:
            stage_codes, rows = layer(op, residual)
            residual = op.Sub(residual, rows)
            codes.append(op.Unsqueeze(stage_codes, [1]))
        return op.Concat(*codes, axis=1)


class MimiSplitResidualVectorQuantizer(nn.Module):
    """The semantic stages, then the acoustic ones, both over the same latents."""

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        self.semantic_count = config.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = MimiResidualVectorQuantizer(
            config, config.num_semantic_quantizers
        )
        self.acoustic_residual_vector_quantizer = MimiResidualVectorQuantizer(
            config, config.n_codebooks - config.num_semantic_quantizers
        )

    def forward(self, op, latents=None, audio_codes=None):
        semantic = self.semantic_residual_vector_quantizer
        acoustic = self.acoustic_residual_vector_quantizer
        if audio_codes is None:
            return op.Concat(semantic(op, latents), acoustic(op, latents), axis=1)
        axes = op.Constant(value_ints=[1])
        split = op.Constant(value_ints=[self.semantic_count])
        first = op.Slice(audio_codes, op.Constant(value_ints=[0]), split, axes)
        rest = op.Slice(audio_codes, split, op.Constant(value_ints=[2**62]), axes)
        # No acoustic codes (K <= semantic stages) sum to zeros: transformers skips that term.
        return op.Add(semantic(op, audio_codes=first), acoustic(op, audio_codes=rest))


class MimiModel(Model):
    """The audio-codec hooks: ``encode(op, input_values)``, ``decode(op, audio_codes)``."""

    config_class = MimiConfig
    task = "audio-codec"
    #: The codebooks' k-means flag: training state, unused by encode and decode.
    ignored = ("quantizer.*.layers.*.codebook.initialized",)

    def __init__(self, config: MimiConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = MimiEncoder(config)
        self.encoder_transformer = MimiTransformer(config)
        self.downsample = MimiDownsample(config)
        self.quantizer = MimiSplitResidualVectorQuantizer(config)
        self.upsample = MimiUpsample(config)
        self.decoder_transformer = MimiTransformer(config)
        self.decoder = MimiDecoder(config)

    def latents(self, op, input_values):
        """``[batch, channels, samples]`` -> ``[batch, hidden, ceil(samples / hop_length)]``."""
        return self.downsample(op, self.encoder_transformer(op, self.encoder(op, input_values)))

    def encode(self, op, input_values):
        """``[batch, channels, samples]`` -> int64 ``[batch, n_codebooks, frames]``."""
        return self.quantizer(op, self.latents(op, input_values))

    def decode(self, op, audio_codes):
        """``[batch, K, frames]`` (``K <= n_codebooks``) -> ``[batch, channels, frames * hop]``."""
        x = self.upsample(op, self.quantizer(op, audio_codes=audio_codes))
        return self.decoder(op, self.decoder_transformer(op, x))

    def sanitize(self, weights: dict) -> dict:
        """Weight-normalised convolutions folded, should a checkpoint keep them."""
        return fold_weight_norm(weights)


MODEL_TYPES = {"mimi": MimiModel}
