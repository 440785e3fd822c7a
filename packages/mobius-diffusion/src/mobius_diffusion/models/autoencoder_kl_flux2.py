"""AutoencoderKLFlux2: Flux.2's VAE, AutoencoderKL plus the latents' batch-norm statistics.

diffusers' ``AutoencoderKLFlux2`` encodes and decodes as :class:`AutoencoderKL`
(the same ``Encoder`` and ``Decoder``, ``quant_conv``, ``post_quant_conv``); its
decoder may be wider or narrower than the encoder (``decoder_block_out_channels``).
It adds ``bn``, a ``BatchNorm2d`` without affine weights over the 2x2-patchified
latents (``prod(patch_size) * latent_channels`` channels): the Flux.2 pipelines
normalise the patchified encoder latents with its running statistics and undo
that before decoding, never calling it. Its statistics are the weights of a third
graph, ``bn/model`` (no inputs -> ``running_mean``, ``running_var``), so that the
runner reads them from the package; the update counter is training state.
Graphs: ``encoder/model``, ``decoder/model`` (AutoencoderKL's) and ``bn/model``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius_diffusion.models._checks import config_float, config_ints
from mobius_diffusion.models.autoencoder_kl import AutoencoderKL, AutoencoderKLConfig, Decoder
from mobius_diffusion.tasks import GraphSpec


@dataclass
class AutoencoderKLFlux2Config(AutoencoderKLConfig):
    decoder_block_out_channels: tuple[int, ...] | None = None
    patch_size: tuple[int, ...] = (2, 2)
    batch_norm_eps: float = 1e-4

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLFlux2Config:
        base = AutoencoderKLConfig.from_hf(config)
        decoder = getattr(config, "decoder_block_out_channels", None)
        if decoder is not None:
            count = len(base.block_out_channels)
            decoder = config_ints(config, "decoder_block_out_channels", None, count=count)
        return cls(
            **vars(base),
            decoder_block_out_channels=decoder,
            patch_size=config_ints(config, "patch_size", (2, 2), count=2),
            batch_norm_eps=config_float(config, "batch_norm_eps", 1e-4),
        )

    @property
    def bn_channels(self) -> int:
        return math.prod(self.patch_size) * self.latent_channels


class Flux2Decoder(Decoder):
    """AutoencoderKL's decoder over ``decoder_block_out_channels`` (the encoder's when unset)."""

    def __init__(self, c: AutoencoderKLFlux2Config) -> None:
        super().__init__(
            replace(c, block_out_channels=c.decoder_block_out_channels or c.block_out_channels)
        )


class LatentStatistics(nn.Module):
    """``bn``'s running statistics (``affine=False``: no weight, no bias)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.running_mean = nn.Parameter([channels])
        self.running_var = nn.Parameter([channels])

    def forward(self, op):
        return {
            "running_mean": op.Identity(self.running_mean),
            "running_var": op.Identity(self.running_var),
        }


class AutoencoderKLFlux2(AutoencoderKL):
    """diffusers' ``AutoencoderKLFlux2``: AutoencoderKL's graphs and ``bn/model``."""

    config_class = AutoencoderKLFlux2Config
    decoder_class = Flux2Decoder
    #: BatchNorm's update counter: training state, not read in eval.
    ignored = ("bn.num_batches_tracked",)

    def __init__(self, config: AutoencoderKLFlux2Config) -> None:
        super().__init__(config)
        self.bn = LatentStatistics(config.bn_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        channels = [self.config.bn_channels]
        outputs = {"running_mean": channels, "running_var": channels}
        return {**super().graph_specs(), "bn/model": GraphSpec({}, outputs, self.bn)}


MODEL_TYPES = {"AutoencoderKLFlux2": AutoencoderKLFlux2}
