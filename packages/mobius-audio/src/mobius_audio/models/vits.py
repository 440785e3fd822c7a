"""VITS (MMS-TTS): text -> waveform, in the two stages of the ``text-to-audio`` contract.

Stage ``text_encoder``: the relative-position transformer over the characters,
the duration predictor (stochastic, its noise a graph input; or the deterministic
convs), and the monotonic alignment: each character's duration
``ceil(exp(log_duration) / speaking_rate)``, cumulated into a path that repeats
the character's prior mean and log-variance over its frames. Stage ``vocoder``:
the prior sample ``mean + noise * exp(log_variance) * noise_scale`` (noise an
input), the residual coupling flow run backwards, and the HiFi-GAN generator. A
multi-speaker model's speaker embedding conditions the duration predictor, the
flow's WaveNets and the generator, as in transformers.

The module tree follows ``VitsModel`` checkpoints (``text_encoder.``,
``duration_predictor.``, ``flow.``, ``decoder.``). Weight-normalised convs
(``parametrizations.weight.original0/1`` or the older ``weight_g/weight_v``) are
folded into a plain ``weight`` when the checkpoint is read. The posterior encoder
and the duration predictor's posterior flows only train the model and are not read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    get_activation,
    merge_heads,
    padding_bias,
    split_heads,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._codec import CodecConvTranspose1d, fold_weight_norm
from mobius_audio.models._vits_duration import StochasticDurationPredictor
from mobius_audio.models._vits_layers import (
    ChannelLayerNorm,
    Conv1d,
    flip_channels,
    floats,
    ints,
    same_conv,
    split_channels,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class VitsConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    window_size: int
    use_bias: bool
    ffn_dim: int
    ffn_kernel_size: int
    hidden_act: str
    layer_norm_eps: float
    flow_size: int
    upsample_initial_channel: int
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    leaky_relu_slope: float
    depth_separable_channels: int
    depth_separable_num_layers: int
    duration_predictor_flow_bins: int
    duration_predictor_tail_bound: float
    duration_predictor_kernel_size: int
    duration_predictor_num_flows: int
    prior_encoder_num_flows: int
    prior_encoder_num_wavenet_layers: int
    wavenet_kernel_size: int
    wavenet_dilation_rate: int
    speaking_rate: float
    noise_scale: float
    noise_scale_duration: float
    sampling_rate: int
    num_speakers: int
    speaker_embedding_size: int
    use_stochastic_duration_prediction: bool
    duration_predictor_filter_channels: int

    @classmethod
    def from_hf(cls, hf_config: Any) -> VitsConfig:
        speakers, width = hf_config.num_speakers, hf_config.speaker_embedding_size
        if not isinstance(speakers, int) or speakers < 1 or (speakers > 1 and width < 1):
            raise ConfigError(
                f"vits: num_speakers {speakers!r} with speaker_embedding_size {width!r}: a "
                "multi-speaker model needs embeddings"
            )
        if getattr(hf_config, "depth_separable_channels", 2) != 2:
            raise ConfigError("vits: depth_separable_channels must be 2 (one spline channel)")
        fields = {name: getattr(hf_config, name) for name in cls.__dataclass_fields__}
        for name in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
            fields[name] = tuple(int(v) for v in fields[name])
        fields["resblock_dilation_sizes"] = tuple(
            tuple(int(d) for d in ds) for ds in fields["resblock_dilation_sizes"]
        )
        if len(fields["upsample_rates"]) != len(fields["upsample_kernel_sizes"]):
            raise ConfigError("vits: upsample_rates and upsample_kernel_sizes differ in length")
        if not fields["speaking_rate"] > 0:
            raise ConfigError(f"vits: speaking_rate must be > 0, got {fields['speaking_rate']!r}")
        if not isinstance(fields["window_size"], int) or fields["window_size"] < 1:
            # transformers' attention reads the relative embeddings whatever the window
            raise ConfigError(f"vits: window_size must be >= 1, got {fields['window_size']!r}")
        return cls(**fields)


class VitsAttention(nn.Module):
    """Self-attention with relative-position keys and values within ``±window_size``."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.heads, self.head_dim, self.window = heads, hidden // heads, config.window_size
        for name in ("k_proj", "v_proj", "q_proj", "out_proj"):
            setattr(self, name, Linear(hidden, hidden, bias=config.use_bias))
        self.emb_rel_k = nn.Parameter([1, 2 * self.window + 1, self.head_dim])
        self.emb_rel_v = nn.Parameter([1, 2 * self.window + 1, self.head_dim])

    def _relative_table(self, op, embeddings, distance_index):
        """``[text, text, head_dim]``: the embedding of key ``j - i`` for query ``i``, 0 beyond the window."""
        zero_row = op.Expand(floats(op, 0.0), ints(op, [1, self.head_dim]))
        table = op.Concat(op.Squeeze(embeddings, [0]), zero_row, axis=0)
        return op.Gather(table, distance_index, axis=0)

    def forward(self, op, x, bias):
        q = split_heads(op, op.Mul(self.q_proj(op, x), floats(op, self.head_dim**-0.5)), self.heads)
        k = split_heads(op, self.k_proj(op, x), self.heads)
        v = split_heads(op, self.v_proj(op, x), self.heads)  # [batch, heads, text, head_dim]
        length = op.Shape(x, start=1, end=2)
        positions = op.Range(ints(op, 0), op.Squeeze(length, [0]), ints(op, 1))
        distance = op.Sub(op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1]))  # j - i
        near = op.LessOrEqual(op.Abs(distance), ints(op, self.window))
        index = op.Where(
            near, op.Add(distance, ints(op, self.window)), ints(op, 2 * self.window + 1)
        )
        keys = self._relative_table(op, self.emb_rel_k, index)
        scores = op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2]))
        scores = op.Add(scores, op.Einsum(q, keys, equation="bhid,ijd->bhij"))
        probs = op.Softmax(op.Add(scores, bias), axis=-1)
        values = self._relative_table(op, self.emb_rel_v, index)
        out = op.Add(op.MatMul(probs, v), op.Einsum(probs, values, equation="bhij,ijd->bhid"))
        return self.out_proj(op, merge_heads(op, out))


class VitsFeedForward(nn.Module):
    """Two convs over time (``ffn_kernel_size``, padded left ``(k-1)//2``, right ``k//2``), masked."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        k = config.ffn_kernel_size
        pads = ((k - 1) // 2, k // 2)
        self.conv_1 = Conv1d(config.hidden_size, config.ffn_dim, k, pads)
        self.conv_2 = Conv1d(config.ffn_dim, config.hidden_size, k, pads)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x, mask):  # x [batch, text, hidden]; mask [batch, 1, text]
        h = op.Mul(op.Transpose(x, perm=[0, 2, 1]), mask)
        h = op.Mul(self.act(op, self.conv_1(op, h)), mask)
        h = op.Mul(self.conv_2(op, h), mask)
        return op.Transpose(h, perm=[0, 2, 1])


class VitsEncoderLayer(nn.Module):
    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.attention = VitsAttention(config)
        self.layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.feed_forward = VitsFeedForward(config)
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, bias, mask):
        x = self.layer_norm(op, op.Add(x, self.attention(op, x, bias)))
        return self.final_layer_norm(op, op.Add(x, self.feed_forward(op, x, mask)))


class VitsEncoder(nn.Module):
    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [VitsEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, op, x, bias, mask):
        for layer in self.layers:
            x = layer(op, x, bias, mask)
        return x


class VitsTextEncoder(nn.Module):
    """Characters -> hidden states ``[batch, hidden, text]`` and the prior ``[batch, 2 * flow, text]``."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.encoder = VitsEncoder(config)
        self.project = Conv1d(config.hidden_size, 2 * config.flow_size)
        self.scale = math.sqrt(config.hidden_size)

    def forward(self, op, input_ids, attention_mask, mask):
        x = op.Mul(self.embed_tokens(op, input_ids), floats(op, self.scale))
        rows = op.Transpose(mask, perm=[0, 2, 1])  # [batch, text, 1]
        x = op.Mul(x, rows)
        bias = padding_bias(op, attention_mask, FLOAT)
        x = self.encoder(op, x, bias, mask)
        hidden = op.Transpose(op.Mul(x, rows), perm=[0, 2, 1])
        return hidden, op.Mul(self.project(op, hidden), mask)


def alignment(op, log_duration, mask, length_scale: float):
    """The monotonic path ``[batch, frames, text]``, each clip's frames ``[batch]`` and the
    frame mask ``[batch, frames]`` (bool).

    ``duration = ceil(exp(log_duration) * length_scale)`` frames per character; a
    frame ``f`` belongs to character ``i`` when ``cum[i-1] <= f < cum[i]``.
    """
    duration = op.Ceil(op.Mul(op.Mul(op.Exp(log_duration), mask), floats(op, length_scale)))
    total = op.ReduceSum(duration, ints(op, [1, 2]), keepdims=0)  # [batch]
    lengths = op.Cast(op.Max(total, floats(op, 1.0)), to=ir.DataType.INT64)
    frames = op.Range(ints(op, 0), op.ReduceMax(lengths, keepdims=0), ints(op, 1))
    frame_mask = op.Less(op.Unsqueeze(frames, [0]), op.Unsqueeze(lengths, [1]))  # [batch, frames]
    ends = op.Transpose(op.CumSum(duration, ints(op, -1)), perm=[0, 2, 1])  # [batch, text, 1]
    steps = op.Cast(op.Unsqueeze(frames, [0, 1]), to=FLOAT)
    before_end = op.Cast(op.Less(steps, ends), to=FLOAT)  # [batch, text, frames]
    shifted = op.Pad(before_end, ints(op, [0, 1, 0, 0, 0, 0]))
    before_start = op.Slice(
        shifted, ints(op, [0]), op.Shape(before_end, start=1, end=2), ints(op, [1])
    )
    path = op.Transpose(op.Sub(before_end, before_start), perm=[0, 2, 1])  # [batch, frames, text]
    path = op.Mul(op.Mul(path, mask), op.Unsqueeze(op.Cast(frame_mask, to=FLOAT), [2]))
    return path, lengths, frame_mask


class VitsWaveNet(nn.Module):
    """Gated dilated convs with residual and skip outputs; a speaker shifts each layer's gates."""

    def __init__(self, config: VitsConfig, num_layers: int) -> None:
        super().__init__()
        hidden = self.hidden = config.hidden_size
        self.in_layers = nn.ModuleList(
            [
                same_conv(
                    hidden, 2 * hidden, config.wavenet_kernel_size, config.wavenet_dilation_rate**i
                )
                for i in range(num_layers)
            ]
        )
        self.res_skip_layers = nn.ModuleList(
            [
                Conv1d(hidden, 2 * hidden if i < num_layers - 1 else hidden)
                for i in range(num_layers)
            ]
        )
        self.cond_layer = None
        if config.num_speakers > 1:
            self.cond_layer = Conv1d(config.speaker_embedding_size, 2 * hidden * num_layers)

    def forward(self, op, x, mask, speaker=None):
        output = None
        last = len(self.in_layers) - 1
        conditions = None if self.cond_layer is None else self.cond_layer(op, speaker)
        width = 2 * self.hidden  # each layer's slice of the conditioning channels
        for i, (in_layer, res_skip) in enumerate(
            zip(self.in_layers, self.res_skip_layers, strict=True)
        ):
            gates = in_layer(op, x)
            if conditions is not None:
                start, stop = ints(op, [i * width]), ints(op, [(i + 1) * width])
                gates = op.Add(gates, op.Slice(conditions, start, stop, ints(op, [1])))
            tanh_half, sigmoid_half = split_channels(op, gates, self.hidden)
            acts = res_skip(op, op.Mul(op.Tanh(tanh_half), op.Sigmoid(sigmoid_half)))
            skip = acts
            if i < last:
                residual, skip = split_channels(op, acts, self.hidden)
                x = op.Mul(op.Add(x, residual), mask)
            output = skip if output is None else op.Add(output, skip)
        return op.Mul(output, mask)


class VitsDurationPredictor(nn.Module):
    """The deterministic predictor (``use_stochastic_duration_prediction=False``): two convs."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        kernel, channels = (
            config.duration_predictor_kernel_size,
            config.duration_predictor_filter_channels,
        )
        pads = (kernel // 2, kernel // 2)
        self.conv_1 = Conv1d(config.hidden_size, channels, kernel, pads)
        self.norm_1 = ChannelLayerNorm(channels, config.layer_norm_eps)
        self.conv_2 = Conv1d(channels, channels, kernel, pads)
        self.norm_2 = ChannelLayerNorm(channels, config.layer_norm_eps)
        self.proj = Conv1d(channels, 1)
        self.cond = None
        if config.num_speakers > 1:
            self.cond = Conv1d(config.speaker_embedding_size, config.hidden_size)

    def forward(self, op, x, mask, speaker=None):
        """``x [batch, hidden, text]`` -> log durations ``[batch, 1, text]``."""
        if self.cond is not None:
            x = op.Add(x, self.cond(op, speaker))
        x = self.norm_1(op, op.Relu(self.conv_1(op, op.Mul(x, mask))))
        x = self.norm_2(op, op.Relu(self.conv_2(op, op.Mul(x, mask))))
        return op.Mul(self.proj(op, op.Mul(x, mask)), mask)


class VitsResidualCouplingLayer(nn.Module):
    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.half = config.flow_size // 2
        self.conv_pre = Conv1d(self.half, config.hidden_size)
        self.wavenet = VitsWaveNet(config, config.prior_encoder_num_wavenet_layers)
        self.conv_post = Conv1d(config.hidden_size, self.half)

    def forward(self, op, x, mask, speaker=None):  # the inverse: inference runs the flow backwards
        first, second = split_channels(op, x, self.half)
        h = self.wavenet(op, op.Mul(self.conv_pre(op, first), mask), mask, speaker)
        mean = op.Mul(self.conv_post(op, h), mask)
        return op.Concat(first, op.Mul(op.Sub(second, mean), mask), axis=1)


class VitsResidualCouplingBlock(nn.Module):
    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.flows = nn.ModuleList(
            [VitsResidualCouplingLayer(config) for _ in range(config.prior_encoder_num_flows)]
        )

    def forward(self, op, x, mask, speaker=None):  # the inverse: inference runs the flow backwards
        for flow in reversed(list(self.flows)):
            x = flow(op, flip_channels(op, x), mask, speaker)
        return x


class HifiGanResidualBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...], slope: float):
        super().__init__()
        self.convs1 = nn.ModuleList([same_conv(channels, channels, kernel, d) for d in dilations])
        self.convs2 = nn.ModuleList([same_conv(channels, channels, kernel) for _ in dilations])
        self.slope = slope

    def forward(self, op, x):
        for conv1, conv2 in zip(self.convs1, self.convs2, strict=True):
            h = conv1(op, op.LeakyRelu(x, alpha=self.slope))
            x = op.Add(conv2(op, op.LeakyRelu(h, alpha=self.slope)), x)
        return x


class VitsHifiGan(nn.Module):
    """Spectrogram-like latents ``[batch, flow, frames]`` -> waveform ``[batch, 1, samples]``."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        first = config.upsample_initial_channel
        self.conv_pre = Conv1d(config.flow_size, first, 7, (3, 3))
        self.upsampler = nn.ModuleList(
            [
                CodecConvTranspose1d(
                    first // 2**i,
                    first // 2 ** (i + 1),
                    k,
                    stride=rate,
                    pads=((k - rate) // 2,) * 2,
                )
                for i, (rate, k) in enumerate(
                    zip(config.upsample_rates, config.upsample_kernel_sizes, strict=True)
                )
            ]
        )
        kernels = list(
            zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=True)
        )
        self.resblocks = nn.ModuleList(
            [
                HifiGanResidualBlock(first // 2 ** (i + 1), k, d, config.leaky_relu_slope)
                for i in range(len(config.upsample_rates))
                for k, d in kernels
            ]
        )
        channels = first // 2 ** len(config.upsample_rates)
        self.conv_post = Conv1d(channels, 1, 7, (3, 3), bias=False)
        self.slope, self.per_stage = config.leaky_relu_slope, len(kernels)
        self.cond = None
        if config.num_speakers > 1:
            self.cond = Conv1d(config.speaker_embedding_size, first)

    def forward(self, op, x, speaker=None):
        x = self.conv_pre(op, x)
        if self.cond is not None:
            x = op.Add(x, self.cond(op, speaker))
        blocks = list(self.resblocks)
        for i, upsample in enumerate(self.upsampler):
            x = upsample(op, op.LeakyRelu(x, alpha=self.slope))
            stage = blocks[i * self.per_stage : (i + 1) * self.per_stage]
            total = stage[0](op, x)
            for block in stage[1:]:
                total = op.Add(total, block(op, x))
            x = op.Div(total, floats(op, float(self.per_stage)))
        x = op.LeakyRelu(x, alpha=0.01)  # torch's default slope, as transformers calls it here
        return op.Tanh(self.conv_post(op, x))


class VitsModel(Model):
    """``VitsModel``: the ``text-to-audio`` hooks :meth:`encode_text` and :meth:`synthesize`."""

    task = "text-to-audio"
    config_class = VitsConfig
    ignored = (
        "posterior_encoder.*",
        "duration_predictor.post_*",
        "duration_predictor.flows.1.*",  # the flow inference skips
    )

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.config = config
        self.text_encoder = VitsTextEncoder(config)
        self.duration_predictor = (
            StochasticDurationPredictor(config)
            if config.use_stochastic_duration_prediction
            else VitsDurationPredictor(config)
        )
        self.flow = VitsResidualCouplingBlock(config)
        self.decoder = VitsHifiGan(config)
        self.embed_speaker = None
        if config.num_speakers > 1:
            self.embed_speaker = Embedding(config.num_speakers, config.speaker_embedding_size)
        else:  # transformers makes speaker convs whenever the embedding size is set
            self.ignored = (*self.ignored, "*.cond.*", "*.cond_layer.*")

    def noise_channels(self) -> dict[str, int]:
        """The channels of each noise input (``[batch, channels, text or frames]``)."""
        if not self.config.use_stochastic_duration_prediction:
            return {"prior_noise": self.config.flow_size}
        return {"duration_noise": 2, "prior_noise": self.config.flow_size}

    def num_speakers(self) -> int:
        """More than 1: both graphs take ``speaker_id`` int64 [batch]."""
        return self.config.num_speakers

    def _speaker(self, op, speaker_id):
        """``[batch, speaker_embedding_size, 1]``, or None for a single-speaker model."""
        if self.embed_speaker is None:
            return None
        return op.Unsqueeze(self.embed_speaker(op, speaker_id), [2])

    def encode_text(self, op, input_ids, attention_mask, *noise_and_speaker) -> dict:
        """Stage 1: the prior over the frames, the frame mask and each clip's length in samples.

        ``noise_and_speaker``: ``duration_noise`` for a stochastic predictor, then
        ``speaker_id`` for a multi-speaker model (the task's inputs, in that order).
        """
        inputs = list(noise_and_speaker)
        duration_noise = inputs.pop(0) if "duration_noise" in self.noise_channels() else None
        speaker_id = inputs.pop(0) if inputs else None
        mask = op.Unsqueeze(op.Cast(attention_mask, to=FLOAT), [1])  # [batch, 1, text]
        hidden, stats = self.text_encoder(op, input_ids, attention_mask, mask)
        speaker = self._speaker(op, speaker_id)
        if duration_noise is None:
            log_duration = self.duration_predictor(op, hidden, mask, speaker)
        else:
            log_duration = self.duration_predictor(op, hidden, mask, duration_noise, speaker)
        path, lengths, frame_mask = alignment(
            op, log_duration, mask, 1.0 / self.config.speaking_rate
        )
        means, log_variances = split_channels(op, stats, self.config.flow_size)
        expand = lambda prior: op.MatMul(prior, op.Transpose(path, perm=[0, 2, 1]))  # noqa: E731
        samples_per_frame = int(np.prod(self.config.upsample_rates))
        return {
            "prior_means": expand(means),
            "prior_log_variances": expand(log_variances),
            "frame_mask": op.Cast(frame_mask, to=ir.DataType.INT64),
            "waveform_lengths": op.Mul(lengths, ints(op, samples_per_frame)),
        }

    def synthesize(
        self, op, prior_means, prior_log_variances, frame_mask, prior_noise, speaker_id=None
    ):
        """Stage 2: sample the prior, invert the flow, vocode: ``waveform [batch, samples]``."""
        mask = op.Unsqueeze(op.Cast(frame_mask, to=FLOAT), [1])  # [batch, 1, frames]
        speaker = self._speaker(op, speaker_id)
        spread = op.Mul(op.Exp(prior_log_variances), floats(op, self.config.noise_scale))
        latents = op.Add(prior_means, op.Mul(prior_noise, spread))
        latents = op.Mul(self.flow(op, latents, mask, speaker), mask)
        return op.Squeeze(self.decoder(op, latents, speaker), [1])

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """Fold each weight-normalised conv's ``(g, v)`` into ``weight``."""
        return fold_weight_norm(weights)


MODEL_TYPES = {"vits": VitsModel}
