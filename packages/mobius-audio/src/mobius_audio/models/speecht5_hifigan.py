"""SpeechT5's HiFi-GAN vocoder (``microsoft/speecht5_hifigan``): log-mel frames to a waveform.

Its own checkpoint and its own type: transformers names it ``speecht5_hifigan``;
the hub's ``config.json`` still says ``hifigan``, which transformers' AutoConfig
no longer knows, so :mod:`mobius_audio.speecht5_sources` claims such a directory by
its ``architectures`` (``SpeechT5HifiGan``). Graph: ``spectrogram-vocoder``
(:mod:`mobius_audio.tasks_speecht5_tts`).

The generator is VITS's HiFi-GAN (:class:`~mobius_audio.models.vits.VitsHifiGan`:
the same ``conv_pre``, ``upsampler``, ``resblocks``, ``conv_post`` names) fed
``(spectrogram - mean) / scale`` when ``normalize_before``, with a biased
``conv_post`` and no speaker conditioning. The checkpoint stores plain conv
weights (weight norm removed); a weight-normed one is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._checks import checked_int
from mobius_audio.models._vits_layers import Conv1d
from mobius_audio.models.vits import VitsHifiGan

MODEL_TYPE = "speecht5_hifigan"


@dataclass
class SpeechT5HifiGanConfig:
    model_type: str
    model_in_dim: int
    sampling_rate: int
    upsample_initial_channel: int
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    leaky_relu_slope: float
    normalize_before: bool
    #: What :class:`VitsHifiGan` reads: no speakers, ``model_in_dim`` input channels.
    num_speakers: int = 1

    @property
    def flow_size(self) -> int:  # VitsHifiGan's name for its input channels
        return self.model_in_dim

    @classmethod
    def from_hf(cls, hf: Any) -> SpeechT5HifiGanConfig:
        def positive_ints(name: str) -> tuple[int, ...]:
            values = tuple(getattr(hf, name))
            if not values or not all(type(v) is int and v > 0 for v in values):
                raise ConfigError(f"{MODEL_TYPE}: {name} must be positive integers, not {values!r}")
            return values

        for name in ("model_in_dim", "upsample_initial_channel", "sampling_rate"):
            checked_int(getattr(hf, name, None), f"{MODEL_TYPE} {name}")
        rates, kernels = positive_ints("upsample_rates"), positive_ints("upsample_kernel_sizes")
        if len(rates) != len(kernels):
            raise ConfigError(
                f"{MODEL_TYPE}: upsample_rates and upsample_kernel_sizes differ in length"
            )
        if hf.upsample_initial_channel % 2 ** len(rates):
            raise ConfigError(
                f"{MODEL_TYPE}: upsample_initial_channel does not halve {len(rates)} times"
            )
        resblock_kernels = positive_ints("resblock_kernel_sizes")
        dilations = tuple(tuple(d) for d in hf.resblock_dilation_sizes)
        if len(dilations) != len(resblock_kernels) or not all(
            d and all(type(v) is int and v > 0 for v in d) for d in dilations
        ):
            raise ConfigError(f"{MODEL_TYPE}: resblock_dilation_sizes must pair with the kernels")
        slope = hf.leaky_relu_slope
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ConfigError(f"{MODEL_TYPE}: leaky_relu_slope {slope!r} is not a number")
        return cls(
            model_type=MODEL_TYPE,
            model_in_dim=hf.model_in_dim,
            sampling_rate=hf.sampling_rate,
            upsample_initial_channel=hf.upsample_initial_channel,
            upsample_rates=rates,
            upsample_kernel_sizes=kernels,
            resblock_kernel_sizes=resblock_kernels,
            resblock_dilation_sizes=dilations,
            leaky_relu_slope=float(slope),
            normalize_before=bool(hf.normalize_before),
        )


class SpeechT5HifiGan(VitsHifiGan, Model):
    """``spectrogram [batch, frames, model_in_dim]`` -> ``waveform [batch, samples]``."""

    task = "spectrogram-vocoder"
    config_class = SpeechT5HifiGanConfig

    def __init__(self, config: SpeechT5HifiGanConfig) -> None:
        super().__init__(config)
        channels = config.upsample_initial_channel // 2 ** len(config.upsample_rates)
        self.conv_post = Conv1d(channels, 1, 7, (3, 3))  # biased, unlike VITS's
        self.config = config
        if config.normalize_before:
            self.mean = nn.Parameter([config.model_in_dim])
            self.scale = nn.Parameter([config.model_in_dim])
        else:  # the buffers are saved all the same
            self.ignored = ("mean", "scale")

    def samples_per_frame(self) -> int:
        """The waveform samples each spectrogram frame becomes."""
        total = 1
        for rate in self.config.upsample_rates:
            total *= rate
        return total

    def vocode(self, op, spectrogram):
        """The waveform ``[batch, samples]`` of ``spectrogram [batch, frames, model_in_dim]``."""
        return self(op, spectrogram)  # through __call__: the parameters join the graph

    def forward(self, op, spectrogram):
        if self.config.normalize_before:
            spectrogram = op.Div(op.Sub(spectrogram, self.mean), self.scale)
        waveform = super().forward(op, op.Transpose(spectrogram, perm=[0, 2, 1]))
        return op.Squeeze(waveform, [1])


MODEL_TYPES = {MODEL_TYPE: SpeechT5HifiGan}
