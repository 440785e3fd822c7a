"""AutoencoderTiny: TAESD, the distilled tiny autoencoder (TAESD, TAESDXL, TAESD3, TAEF1).

Plain convolutions, no norms, no attention. Encoder: ``[-1, 1]`` pixels mapped to
``[0, 1]``, a conv, then per stage a stride-2 conv (none before the first) and
``AutoencoderTinyBlock``s (three 3x3 convs with the activation between, the input added
back, ReLU), a conv to ``latent_channels``. Decoder: the latents soft-clamped to ``(-3, 3)`` (``3 tanh(x / 3)``), a conv and the
activation, then per stage its blocks, an upsample (``upsampling_scaling_factor``,
none after the last) and a conv (the last to ``out_channels``, with a bias), the
``[0, 1]`` output mapped back to ``[-1, 1]``. Both are ``nn.Sequential``s in diffusers:
the modules are its ``layers.{i}``, parameter-free ones (activations, upsamples) keep
their index.

Graphs (:class:`mobius.tasks.VAETask`): ``encoder/model`` ``sample`` -> ``latent``
(``encode().latents``: TAESD has no latent distribution) and ``decoder/model``
``latent_sample`` -> ``sample`` (``decode().sample``). ``latent_magnitude`` and
``latent_shift`` only quantise latents to bytes in diffusers' ``forward`` (a round trip
no pipeline calls), so neither graph applies them; ``scaling_factor`` (1.0 for TAESD)
and ``shift_factor`` are the pipeline's, as for AutoencoderKL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_choice, config_int, config_ints
from mobius_diffusion.models._resnet import activation
from mobius_diffusion.tasks import GraphSpec


@dataclass
class AutoencoderTinyConfig:
    in_channels: int = 3
    out_channels: int = 3
    encoder_block_out_channels: tuple[int, ...] = (64, 64, 64, 64)
    decoder_block_out_channels: tuple[int, ...] = (64, 64, 64, 64)
    num_encoder_blocks: tuple[int, ...] = (1, 3, 3, 3)
    num_decoder_blocks: tuple[int, ...] = (3, 3, 3, 1)
    act_fn: str = "relu"
    latent_channels: int = 4
    upsampling_scaling_factor: int = 2

    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderTinyConfig:
        name = config.model_type
        stages = {}
        for part, blocks in (("encoder", (1, 3, 3, 3)), ("decoder", (3, 3, 3, 1))):
            widths = config_ints(config, f"{part}_block_out_channels", (64,) * len(blocks))
            counts = config_ints(config, f"num_{part}_blocks", blocks, count=len(widths), low=0)
            # diffusers makes each stage's convs and blocks width -> width: a change of width
            # between stages is a model that cannot run
            if len(set(widths)) != 1:
                raise ConfigError(
                    f"{name} {part}_block_out_channels {list(widths)}: every stage must keep "
                    f"one width (diffusers' stages do not change it)"
                )
            stages[part] = widths, counts
        act_fn = getattr(config, "act_fn", "relu")
        activation(act_fn)  # ConfigError for one mobius does not build
        config_choice(config, "upsample_fn", "nearest", ("nearest",))
        return cls(
            in_channels=config_int(config, "in_channels", 3),
            out_channels=config_int(config, "out_channels", 3),
            encoder_block_out_channels=stages["encoder"][0],
            decoder_block_out_channels=stages["decoder"][0],
            num_encoder_blocks=stages["encoder"][1],
            num_decoder_blocks=stages["decoder"][1],
            act_fn=act_fn,
            latent_channels=config_int(config, "latent_channels", 4),
            upsampling_scaling_factor=config_int(config, "upsampling_scaling_factor", 2),
        )

    @property
    def encoder_scale(self) -> int:
        """Pixels per latent on each side: a stride-2 conv per stage after the first."""
        return 2 ** (len(self.encoder_block_out_channels) - 1)


class Activation(nn.Module):
    """A parameter-free ``layers.{i}`` of diffusers' Sequential: the activation."""

    def __init__(self, act_fn: str) -> None:
        super().__init__()
        self.act = activation(act_fn)

    def forward(self, op, x):
        return self.act(op, x)


class Upsample(nn.Module):
    """A parameter-free ``layers.{i}``: ``nn.Upsample(scale_factor, mode="nearest")``."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = float(factor)

    def forward(self, op, x):
        scales = op.Constant(
            value=ir.tensor([1.0, 1.0, self.factor, self.factor], dtype=ir.DataType.FLOAT)
        )
        return op.Resize(
            x,
            None,
            scales,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )


class AutoencoderTinyBlock(nn.Module):
    """``conv.{0,2,4}`` with the activation between, the input added back, then ReLU.

    diffusers' ``skip`` is a 1x1 conv only when the widths differ, which no runnable
    config has (:meth:`AutoencoderTinyConfig.from_hf`): here it is the identity.
    """

    def __init__(self, channels: int, act_fn: str) -> None:
        super().__init__()
        self.act = activation(act_fn)
        self.conv = nn.ModuleList(
            [
                Conv2d(channels, channels, 3, padding=1),
                nn.Module(),  # the activation
                Conv2d(channels, channels, 3, padding=1),
                nn.Module(),
                Conv2d(channels, channels, 3, padding=1),
            ]
        )

    def forward(self, op, x):
        h = self.act(op, self.conv[0](op, x))
        h = self.conv[4](op, self.act(op, self.conv[2](op, h)))
        return op.Relu(op.Add(h, x))  # diffusers' ``fuse``: ReLU whatever act_fn


class EncoderTiny(nn.Module):
    def __init__(self, c: AutoencoderTinyConfig) -> None:
        super().__init__()
        layers = []
        for i, (width, count) in enumerate(
            zip(c.encoder_block_out_channels, c.num_encoder_blocks, strict=True)
        ):
            if i == 0:
                layers.append(Conv2d(c.in_channels, width, 3, padding=1))
            else:
                layers.append(Conv2d(width, width, 3, stride=2, padding=1, bias=False))
            layers += [AutoencoderTinyBlock(width, c.act_fn) for _ in range(count)]
        layers.append(Conv2d(c.encoder_block_out_channels[-1], c.latent_channels, 3, padding=1))
        self.layers = nn.ModuleList(layers)

    def forward(self, op, sample):
        x = op.Div(op.Add(sample, op.CastLike(1.0, sample)), op.CastLike(2.0, sample))  # -> [0, 1]
        for layer in self.layers:
            x = layer(op, x)
        return x


class DecoderTiny(nn.Module):
    def __init__(self, c: AutoencoderTinyConfig) -> None:
        super().__init__()
        widths, counts = c.decoder_block_out_channels, c.num_decoder_blocks
        layers = [Conv2d(c.latent_channels, widths[0], 3, padding=1), Activation(c.act_fn)]
        for i, (width, count) in enumerate(zip(widths, counts, strict=True)):
            last = i == len(widths) - 1
            layers += [AutoencoderTinyBlock(width, c.act_fn) for _ in range(count)]
            if not last:
                layers.append(Upsample(c.upsampling_scaling_factor))
            layers.append(Conv2d(width, c.out_channels if last else width, 3, padding=1, bias=last))
        self.layers = nn.ModuleList(layers)

    def forward(self, op, latent):
        three = op.CastLike(3.0, latent)
        x = op.Mul(op.Tanh(op.Div(latent, three)), three)  # soft clamp to (-3, 3)
        for layer in self.layers:
            x = layer(op, x)
        return op.Sub(op.Mul(x, op.CastLike(2.0, x)), op.CastLike(1.0, x))  # [0, 1] -> [-1, 1]


class AutoencoderTiny(Model):
    """diffusers' ``AutoencoderTiny``: ``encoder/model`` and ``decoder/model``."""

    config_class = AutoencoderTinyConfig
    task = "vae"

    def __init__(self, config: AutoencoderTinyConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = EncoderTiny(config)
        self.decoder = DecoderTiny(config)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        latent = ["batch", c.latent_channels, "latent_height", "latent_width"]
        return {
            "encoder/model": GraphSpec(
                {"sample": (None, ["batch", c.in_channels, "height", "width"])},
                {"latent": latent},
                lambda op, sample: {"latent": self.encoder(op, sample)},
            ),
            "decoder/model": GraphSpec(
                {"latent_sample": (None, latent)},
                {"sample": ["batch", c.out_channels, "height", "width"]},
                lambda op, latent_sample: {"sample": self.decoder(op, latent_sample)},
            ),
        }


MODEL_TYPES = {"AutoencoderTiny": AutoencoderTiny}
