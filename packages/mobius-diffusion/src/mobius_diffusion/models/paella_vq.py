"""Würstchen's Paella VQGAN (``PaellaVQModel``): Stable Cascade's stage A, latents to pixels.

Encoder: pixel-unshuffle by ``up_down_scale_factor``, a 1x1 conv, then per level a
stride-2 4x4 conv (after the first) and a mixing residual block, and a 1x1 conv to
``latent_channels`` with a BatchNorm. Decoder: a 1x1 conv, ``bottleneck_blocks``
mixing blocks at the deepest level and one per level after, a stride-2 transposed
conv between levels, a 1x1 conv and the pixel shuffle. A mixing block modulates two
weightless channel norms with its six ``gammas``: ``x + depthwise(norm1(x)) * g2``
(edge padding), then ``x + channelwise(norm2(x)) * g5``.

Graphs (:class:`mobius_diffusion.tasks.VAETask`): ``encoder/model`` ``sample`` ->
``latent`` (diffusers' ``encode(x).latents``, before quantization) and
``decoder/model`` ``latent_sample`` -> ``sample``, as the Stable Cascade pipelines
decode (``force_not_quantize``: the latents as they are, no codebook lookup); the
pipeline multiplies the latents by ``scale_factor`` first and clamps the image to [0, 1].
The codebook (``vquantizer.embedding.weight``) is used by neither graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import BatchNorm, Conv2d, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_float, config_int
from mobius_diffusion.models._dit_blocks import WeightlessLayerNorm
from mobius_diffusion.models._stable_cascade_blocks import (
    EPS,
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    ChannelLayerNorm,
    ConvTranspose2d,
)
from mobius_diffusion.models.autoencoder_dc import pixel_shuffle, pixel_unshuffle
from mobius_diffusion.tasks import GraphSpec


@dataclass
class PaellaVQConfig:
    in_channels: int = 3
    out_channels: int = 3
    up_down_scale_factor: int = 2
    levels: int = 2
    bottleneck_blocks: int = 12
    embed_dim: int = 384
    latent_channels: int = 4

    @classmethod
    def from_hf(cls, config: Any) -> PaellaVQConfig:
        levels = config_int(config, "levels", 2)
        embed_dim = config_int(config, "embed_dim", 384)
        if embed_dim % 2 ** (levels - 1):
            raise ConfigError(
                f"{config.model_type} embed_dim {embed_dim} does not halve {levels - 1} times"
            )
        config_int(config, "num_vq_embeddings", 8192)  # the codebook's size: checked, unused
        config_float(config, "scale_factor", 0.3764)  # the pipeline's
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            up_down_scale_factor=config_int(config, "up_down_scale_factor", 2),
            levels=levels,
            bottleneck_blocks=config_int(config, "bottleneck_blocks", 12),
            embed_dim=embed_dim,
            latent_channels=config_int(config, "latent_channels", 4),
        )

    @property
    def widths(self) -> list[int]:
        """Each level's channels, shallowest first (``embed_dim`` halved per level up)."""
        return [self.embed_dim // 2**i for i in reversed(range(self.levels))]


class MixingResidualBlock(nn.Module):
    """Two gamma-modulated residuals: a depthwise 3x3 conv, then a channel MLP (``embed_dim``)."""

    def __init__(self, channels: int, embed_dim: int) -> None:
        super().__init__()
        self.norm1 = ChannelLayerNorm(channels, EPS)
        self.depthwise = nn.ModuleList(
            [nn.Module(), Conv2d(channels, channels, 3, groups=channels)]  # ReplicationPad2d(1)
        )
        self.norm2 = WeightlessLayerNorm(channels, EPS)  # over NHWC
        self.channelwise = nn.ModuleList(
            [
                Linear(channels, embed_dim, bias=True),
                nn.Module(),
                Linear(embed_dim, channels, bias=True),
            ]
        )
        self.gammas = nn.Parameter([6])

    def forward(self, op, x):
        g = op.Split(self.gammas, num_outputs=6, _outputs=6)  # each [1]
        h = op.Add(op.Mul(self.norm1(op, x), op.Add(g[0], 1.0)), g[1])
        h = op.Pad(h, op.Constant(value_ints=[0, 0, 1, 1, 0, 0, 1, 1]), mode="edge")
        x = op.Add(x, op.Mul(self.depthwise[1](op, h), g[2]))
        h = self.norm2(op, op.Transpose(x, perm=NCHW_TO_NHWC))
        h = op.Add(op.Mul(h, op.Add(g[3], 1.0)), g[4])
        h = self.channelwise[2](op, op.Gelu(self.channelwise[0](op, h)))
        return op.Add(x, op.Mul(op.Transpose(h, perm=NHWC_TO_NCHW), g[5]))


class PaellaVQModel(Model):
    """diffusers' ``PaellaVQModel``: ``encoder/model`` and ``decoder/model``."""

    config_class = PaellaVQConfig
    task = "vae"
    #: The codebook: the pipelines decode unquantized latents. BatchNorm's step counter.
    ignored = ("vquantizer.embedding.weight", "*.num_batches_tracked")

    def __init__(self, config: PaellaVQConfig) -> None:
        super().__init__()
        self.config = c = config
        widths, factor = c.widths, c.up_down_scale_factor
        self.in_block = nn.ModuleList(
            [nn.Module(), Conv2d(c.in_channels * factor**2, widths[0], 1)]
        )
        down: list[nn.Module] = []
        for i, width in enumerate(widths):
            if i > 0:
                down.append(Conv2d(widths[i - 1], width, 4, stride=2, padding=1))
            down.append(MixingResidualBlock(width, width * 4))
        latent = nn.ModuleList(
            [Conv2d(widths[-1], c.latent_channels, 1, bias=False), BatchNorm(c.latent_channels)]
        )
        self.down_blocks = nn.ModuleList([*down, latent])
        up: list[nn.Module] = [nn.ModuleList([Conv2d(c.latent_channels, widths[-1], 1)])]
        for i, width in enumerate(reversed(widths)):
            repeats = c.bottleneck_blocks if i == 0 else 1
            up += [MixingResidualBlock(width, width * 4) for _ in range(repeats)]
            if i < c.levels - 1:
                up.append(ConvTranspose2d(width, width // 2, 4, stride=2, padding=1))
        self.up_blocks = nn.ModuleList(up)
        self.out_block = nn.ModuleList([Conv2d(widths[0], c.out_channels * factor**2, 1)])

    def encode(self, op, sample):
        x = self.in_block[1](op, pixel_unshuffle(op, sample, self.config.up_down_scale_factor))
        for block in list(self.down_blocks)[:-1]:
            x = block(op, x)
        conv, norm = self.down_blocks[len(self.down_blocks) - 1]
        return norm(op, conv(op, x))

    def decode(self, op, latent_sample):
        x = self.up_blocks[0][0](op, latent_sample)
        for block in list(self.up_blocks)[1:]:
            x = block(op, x)
        x = self.out_block[0](op, x)
        return pixel_shuffle(op, x, self.config.up_down_scale_factor)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.latent_channels, "latent_height", "latent_width"]
        return {
            "encoder/model": GraphSpec(
                {"sample": (None, ["batch", c.in_channels, "height", "width"])},
                {"latent": latent},
                lambda op, sample: {"latent": self.encode(op, sample)},
            ),
            "decoder/model": GraphSpec(
                {"latent_sample": (None, latent)},
                {"sample": ["batch", c.out_channels, "height", "width"]},
                lambda op, latent_sample: {"sample": self.decode(op, latent_sample)},
            ),
        }


MODEL_TYPES = {"PaellaVQModel": PaellaVQModel}
