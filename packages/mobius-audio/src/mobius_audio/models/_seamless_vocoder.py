"""SeamlessM4T (v1, v2)'s unit vocoder (``vocoder``): transformers' ``SeamlessM4TCodeHifiGan``.

Each unit id (the unit model's token minus ``vocoder_offset``; ``t2u_pad_token_id``
stays itself) is embedded (``unit_embedding``); the duration predictor
(``dur_predictor``: conv, ReLU, LayerNorm twice, then a projection) gives each
unit ``max(round(expm1(log_duration)), 1)`` frames, and the units are repeated
that many times. A row shorter than the batch's longest is followed by zero
frames, as transformers pads it. The language and speaker embeddings are added
to every frame, as channels ``[language, unit, speaker]``, and SpeechT5's
HiFi-GAN (biased ``conv_post``; :mod:`mobius_audio.models.speecht5_hifigan`)
makes the waveform.

``waveform_lengths`` is transformers' ``(waveform, lengths)`` second value,
computed as it computes it: the duration sum through the unit after the last real
one (the padding unit, where there is one) mapped through the HiFi-GAN's
convolution length formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_audio.models._vits_layers import Conv1d, floats, ints
from mobius_audio.models.seamless_m4t import config_int
from mobius_audio.models.speecht5_hifigan import SpeechT5HifiGan, SpeechT5HifiGanConfig

INT64 = ir.DataType.INT64
DURATION_KERNEL = 3  # transformers pads the second conv by 1: any other kernel breaks its shapes


@dataclass
class CodeHifiGanConfig:
    """The vocoder's fields of a SeamlessM4T config, checked."""

    unit_vocab_size: int
    unit_embed_dim: int
    lang_embed_dim: int
    spkr_embed_dim: int
    num_languages: int
    num_speakers: int
    pad_token_id: int
    offset: int
    generator: SpeechT5HifiGanConfig
    duration_kernel: int = DURATION_KERNEL

    @property
    def sampling_rate(self) -> int:
        return self.generator.sampling_rate

    @classmethod
    def duration_kernel_of(cls, hf: Any) -> int:
        """The duration predictor's kernel: v1's pads its second conv by 1, so only 3 runs."""
        kernel = hf.variance_predictor_kernel_size
        if kernel != DURATION_KERNEL:
            raise ConfigError(
                f"{hf.model_type}: variance_predictor_kernel_size={kernel!r}; transformers' "
                f"duration predictor runs with {DURATION_KERNEL} only"
            )
        return kernel

    @classmethod
    def from_hf(cls, hf: Any) -> CodeHifiGanConfig:
        kernel = cls.duration_kernel_of(hf)
        dims = {
            name: config_int(hf, name, 1)
            for name in ("unit_embed_dim", "lang_embed_dim", "spkr_embed_dim")
        }
        generator = SimpleNamespace(
            model_in_dim=sum(dims.values()),
            normalize_before=False,
            **{
                name: getattr(hf, name, None)
                for name in (
                    "sampling_rate",
                    "upsample_initial_channel",
                    "upsample_rates",
                    "upsample_kernel_sizes",
                    "resblock_kernel_sizes",
                    "resblock_dilation_sizes",
                    "leaky_relu_slope",
                )
            },
        )
        try:
            generator = SpeechT5HifiGanConfig.from_hf(generator)
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{hf.model_type} vocoder: {exc}") from None
        return cls(
            unit_vocab_size=config_int(hf, "unit_hifi_gan_vocab_size", 1),
            num_languages=config_int(hf, "vocoder_num_langs", 1),
            num_speakers=config_int(hf, "vocoder_num_spkrs", 1),
            pad_token_id=config_int(hf, "t2u_pad_token_id", 0),
            offset=config_int(hf, "vocoder_offset", 0),
            generator=generator,
            duration_kernel=kernel,
            **dims,
        )

    def length_affine(self) -> tuple[int, int]:
        """``(scale, shift)``: transformers' HiFi-GAN output length of ``n`` frames is ``scale * n + shift``.

        Its formula walks ``conv_pre``, each transposed upsampler, every resblock conv of
        every stage in sequence (though they run side by side) and ``conv_post``.
        """
        g = self.generator
        scale, shift = 1, 0  # conv_pre and conv_post (kernel 7, padding 3) keep the length
        for rate, kernel in zip(g.upsample_rates, g.upsample_kernel_sizes, strict=True):
            pad = (kernel - rate) // 2
            scale, shift = scale * rate, shift * rate - rate - 2 * pad + kernel
        for _ in g.upsample_rates:
            for kernel, dilations in zip(
                g.resblock_kernel_sizes, g.resblock_dilation_sizes, strict=True
            ):
                for dilation in dilations:
                    shift += 2 * ((kernel - 1) * dilation // 2) - dilation * (kernel - 1)
                for _ in dilations:
                    shift += 2 * ((kernel - 1) // 2) - (kernel - 1)
        return scale, shift


def same_pads(kernel: int) -> tuple[int, int]:
    """torch's ``padding="same"``: the extra pad of an even kernel goes on the right."""
    return (kernel - 1) // 2, kernel - 1 - (kernel - 1) // 2


class SeamlessM4TVariancePredictor(nn.Module):
    """Log durations ``[batch, units]`` of unit embeddings ``[batch, units, dim]``."""

    def __init__(self, dim: int, kernel: int = DURATION_KERNEL) -> None:
        super().__init__()
        self.conv1 = Conv1d(dim, dim, kernel, same_pads(kernel))
        self.ln1 = LayerNorm(dim, 1e-5)
        self.conv2 = Conv1d(dim, dim, kernel, same_pads(kernel))
        self.ln2 = LayerNorm(dim, 1e-5)
        self.proj = Linear(dim, 1, bias=True)

    def forward(self, op, x):
        for conv, norm in ((self.conv1, self.ln1), (self.conv2, self.ln2)):
            x = op.Relu(conv(op, op.Transpose(x, perm=[0, 2, 1])))
            x = norm(op, op.Transpose(x, perm=[0, 2, 1]))
        return op.Squeeze(self.proj(op, x), [2])


def repeat_frames(op, units, durations):
    """Each row's units repeated by their durations, zero frames after a row's end: ``[batch, frames, dim]``."""
    ends = op.CumSum(durations, ints(op, 1))  # [batch, units]
    totals = op.ReduceMax(ends, ints(op, [1]), keepdims=0)  # [batch]: each row's frames
    frame = op.Range(ints(op, 0), op.ReduceMax(totals, keepdims=0), ints(op, 1))  # [frames]
    # frame t belongs to the unit after every unit that ends at or before it
    passed = op.LessOrEqual(op.Unsqueeze(ends, [2]), op.Unsqueeze(frame, [0, 1]))
    index = op.ReduceSum(op.Cast(passed, to=INT64), ints(op, [1]), keepdims=0)  # [batch, frames]
    last = op.Sub(op.Shape(units, start=1, end=2), ints(op, 1))
    index = op.Min(index, last)  # past a row's end: any unit, zeroed below
    frames = op.GatherND(units, op.Unsqueeze(index, [2]), batch_dims=1)
    inside = op.Less(op.Unsqueeze(frame, [0]), op.Unsqueeze(totals, [1]))  # [batch, frames]
    return op.Where(op.Unsqueeze(inside, [2]), frames, floats(op, 0.0)), ends


class SeamlessM4TCodeHifiGan(nn.Module):
    """Units, speaker and language ids -> ``(waveform [batch, samples], waveform_lengths [batch])``."""

    def __init__(self, config: CodeHifiGanConfig) -> None:
        super().__init__()
        self.config = config
        self.dur_predictor = SeamlessM4TVariancePredictor(
            config.unit_embed_dim, config.duration_kernel
        )
        self.unit_embedding = Embedding(config.unit_vocab_size, config.unit_embed_dim)
        self.speaker_embedding = Embedding(config.num_speakers, config.spkr_embed_dim)
        self.language_embedding = Embedding(config.num_languages, config.lang_embed_dim)
        self.hifi_gan = SpeechT5HifiGan(config.generator)

    def forward(self, op, unit_ids, speaker_id, language_id):
        units = self.unit_embedding(op, unit_ids)  # [batch, units, dim]
        log_durations = self.dur_predictor(op, units)
        durations = op.Cast(op.Round(op.Sub(op.Exp(log_durations), floats(op, 1.0))), to=INT64)
        durations = op.Max(durations, ints(op, 1))
        frames, ends = repeat_frames(op, units, durations)
        steps = op.Shape(frames, start=1, end=2)

        def every_frame(embedding, ids):  # [batch] -> [batch, frames, dim]
            vector = op.Unsqueeze(embedding(op, ids), [1])
            return op.Expand(vector, op.Concat(ints(op, [1]), steps, ints(op, [1]), axis=0))

        x = op.Concat(
            every_frame(self.language_embedding, language_id),
            frames,
            every_frame(self.speaker_embedding, speaker_id),
            axis=2,
        )
        waveform = self.hifi_gan(op, x)
        return waveform, self.waveform_lengths(op, unit_ids, ends)

    def waveform_lengths(self, op, unit_ids, ends):
        """transformers' lengths: the frames through unit ``min(real units, units - 1)``, scaled."""
        config = self.config
        real = op.ReduceSum(
            op.Cast(op.Not(op.Equal(unit_ids, ints(op, config.pad_token_id))), to=INT64),
            ints(op, [1]),
        )  # [batch, 1]
        last = op.Sub(op.Shape(unit_ids, start=1, end=2), ints(op, 1))
        frames = op.Squeeze(op.GatherElements(ends, op.Min(real, last), axis=1), [1])
        scale, shift = config.length_affine()
        return op.Add(op.Mul(frames, ints(op, scale)), ints(op, shift))
