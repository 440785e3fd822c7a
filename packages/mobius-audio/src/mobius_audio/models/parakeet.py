"""Parakeet (NVIDIA NeMo): a FastConformer encoder over log-mel frames, and its CTC head.

``parakeet_encoder`` is the bare ``ParakeetEncoder`` (``last_hidden_state``);
``parakeet_ctc`` is ``ParakeetForCTC``: the encoder (under ``encoder.``) and
``ctc_head``, a kernel-1 Conv1d to ``vocab_size`` logits per frame, the last id
(``pad_token_id``) being the CTC blank. The encoder is :mod:`._conformer`'s.

The graph takes what ``ParakeetFeatureExtractor`` returns (numpy:
:mod:`mobius_audio.parakeet_features`): ``input_features [batch, frames, mels]``
(normalised log-mels) and its ``attention_mask [batch, frames]``, on the
``audio-feature-extraction`` contract. The subsampling reduces the frames by
``subsampling_factor`` (``log2`` of it strided convs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import checked_int
from mobius_audio.models._conformer import DepthwiseStridingSubsampling, FastConformerEncoder


def _int(config: Any, name: str, low: int = 1) -> int:
    return checked_int(getattr(config, name, None), f"parakeet {name}", low)


@dataclass
class ParakeetConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    hidden_act: str
    attention_bias: bool
    convolution_bias: bool
    conv_kernel_size: int
    num_mel_bins: int
    subsampling_conv_channels: int
    subsampling_conv_kernel_size: int
    subsampling_conv_stride: int
    subsampling_layers: int
    scale_input: bool
    vocab_size: int = 0  # the CTC head's; 0: no head

    @classmethod
    def from_hf(cls, hf_config: Any) -> ParakeetConfig:
        """The encoder's fields (``encoder_config`` of a CTC config), checked."""
        encoder = getattr(hf_config, "encoder_config", None) or hf_config
        hidden, heads = _int(encoder, "hidden_size"), _int(encoder, "num_attention_heads")
        if hidden % heads:
            raise ConfigError(f"parakeet hidden_size={hidden} is not a multiple of {heads} heads")
        kernel = _int(encoder, "conv_kernel_size")
        if kernel % 2 == 0:
            raise ConfigError(f"parakeet conv_kernel_size={kernel} must be odd")
        factor = _int(encoder, "subsampling_factor", 2)
        if factor & (factor - 1):
            raise ConfigError(f"parakeet subsampling_factor={factor} must be a power of 2")
        layers = factor.bit_length() - 1
        mels, stride = _int(encoder, "num_mel_bins"), _int(encoder, "subsampling_conv_stride")
        sub_kernel = _int(encoder, "subsampling_conv_kernel_size")
        made = DepthwiseStridingSubsampling.output_size(mels, sub_kernel, stride, layers)
        if made != mels // stride**layers:  # transformers sizes its projection by the latter
            raise ConfigError(
                f"parakeet subsampling makes {made} mel columns of {mels}, not {mels}"
                f" // {stride}**{layers}: transformers' projection would not fit"
            )
        is_ctc = hf_config.model_type == "parakeet_ctc"
        return cls(
            model_type=hf_config.model_type,
            hidden_size=hidden,
            intermediate_size=_int(encoder, "intermediate_size"),
            num_hidden_layers=_int(encoder, "num_hidden_layers", 0),
            num_attention_heads=heads,
            hidden_act=str(encoder.hidden_act),
            attention_bias=bool(encoder.attention_bias),
            convolution_bias=bool(encoder.convolution_bias),
            conv_kernel_size=kernel,
            num_mel_bins=mels,
            subsampling_conv_channels=_int(encoder, "subsampling_conv_channels"),
            subsampling_conv_kernel_size=sub_kernel,
            subsampling_conv_stride=stride,
            subsampling_layers=layers,
            scale_input=bool(encoder.scale_input),
            vocab_size=_int(hf_config, "vocab_size") if is_ctc else 0,
        )


def fast_conformer(config: ParakeetConfig) -> FastConformerEncoder:
    """The encoder a Parakeet config describes."""
    return FastConformerEncoder(
        mels=config.num_mel_bins,
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        heads=config.num_attention_heads,
        conv_kernel=config.conv_kernel_size,
        activation=config.hidden_act,
        attention_bias=config.attention_bias,
        conv_bias=config.convolution_bias,
        subsampling_channels=config.subsampling_conv_channels,
        subsampling_kernel=config.subsampling_conv_kernel_size,
        subsampling_stride=config.subsampling_conv_stride,
        subsampling_layers=config.subsampling_layers,
        scale_input=config.scale_input,
    )


class ParakeetEncoderModel(Model):
    """The bare encoder: ``input_features`` and its mask -> ``last_hidden_state``."""

    config_class = ParakeetConfig
    task = "audio-feature-extraction"
    # BatchNorm's counters: training state, never read in eval.
    ignored = ("encoder.layers.*.conv.norm.num_batches_tracked",)

    def __init__(self, config: ParakeetConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = fast_conformer(config)

    def input_shapes(self) -> dict[str, list]:
        """The graph's inputs (``AudioFeatureExtractionTask``): normalised log-mel frames."""
        features = ["batch", "frames", self.config.num_mel_bins]
        return {"input_features": features, "attention_mask": ["batch", "frames"]}

    def output_shapes(self) -> dict[str, list]:
        return {"last_hidden_state": ["batch", "encoder_frames", self.config.hidden_size]}

    def forward(self, op, input_features, attention_mask):
        hidden, _ = self.encoder(op, input_features, attention_mask)
        return {"last_hidden_state": hidden}

    def sanitize(self, weights: dict) -> dict:
        """A bare ``ParakeetEncoder`` checkpoint's keys have no ``encoder.`` prefix."""
        return {
            k if k.startswith(("encoder.", "ctc_head.")) else f"encoder.{k}": v
            for k, v in weights.items()
        }


class ParakeetCTCHead(nn.Module):
    """transformers' kernel-1 Conv1d over ``[batch, frames, hidden]``: a per-frame projection."""

    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([vocab, hidden, 1])
        self.bias = nn.Parameter([vocab])

    def forward(self, op, x):
        weight = op.Transpose(op.Squeeze(self.weight, [2]), perm=[1, 0])  # [hidden, vocab]
        return op.Add(op.MatMul(x, weight), self.bias)


class ParakeetForCTC(ParakeetEncoderModel):
    """The encoder and ``ctc_head``: also ``logits [batch, encoder_frames, vocab_size]``."""

    def __init__(self, config: ParakeetConfig) -> None:
        super().__init__(config)
        self.ctc_head = ParakeetCTCHead(config.hidden_size, config.vocab_size)

    def output_shapes(self) -> dict[str, list]:
        logits = ["batch", "encoder_frames", self.config.vocab_size]
        return dict(super().output_shapes(), logits=logits)

    def forward(self, op, input_features, attention_mask):
        hidden, _ = self.encoder(op, input_features, attention_mask)
        return {"last_hidden_state": hidden, "logits": self.ctc_head(op, hidden)}


MODEL_TYPES = {"parakeet_ctc": ParakeetForCTC, "parakeet_encoder": ParakeetEncoderModel}
