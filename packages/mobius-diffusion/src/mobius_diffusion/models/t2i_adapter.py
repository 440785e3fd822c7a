"""T2I-Adapter: a condition image (edges, depth, pose) to one feature map per UNet resolution.

The image is pixel-unshuffled (``downscale_factor`` folds space into channels),
convolved, then run through one ``AdapterBlock`` per entry of ``channels``
(optional 2x average-pool down, a 1x1 conv when the width changes, residual
3x3/1x1 conv pairs); each block's output is a feature. ``full_adapter`` pools
in every block after the first, ``full_adapter_xl`` only in the third. The module
tree follows diffusers' ``T2IAdapter`` checkpoints (``adapter.body.0.resnets.1.block2``).
Graph: :class:`mobius.tasks.AdapterTask`, ``condition`` -> ``features.{i}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.tasks import GraphSpec


@dataclass
class T2IAdapterConfig:
    in_channels: int = 3
    channels: tuple[int, ...] = (320, 640, 1280, 1280)
    num_res_blocks: int = 2
    downscale_factor: int = 8
    adapter_type: str = "full_adapter"

    @classmethod
    def from_hf(cls, config: Any) -> T2IAdapterConfig:
        adapter_type = getattr(config, "adapter_type", "full_adapter")
        if adapter_type not in ("full_adapter", "full_adapter_xl"):
            raise ConfigError(f"T2IAdapter adapter_type {adapter_type!r} is not built by mobius")
        return cls(
            in_channels=config.in_channels,
            channels=tuple(config.channels),
            num_res_blocks=config.num_res_blocks,
            downscale_factor=config.downscale_factor,
            adapter_type=adapter_type,
        )

    def downsamples(self) -> list[bool]:
        """Which blocks halve the resolution first."""
        if self.adapter_type == "full_adapter_xl":
            return [i == 2 for i in range(len(self.channels))]
        return [i > 0 for i in range(len(self.channels))]


def pixel_unshuffle(op, x, factor: int):
    """``torch.nn.PixelUnshuffle``: [b, c, h, w] -> [b, c*f*f, h/f, w/f], channel-major order.

    (ONNX SpaceToDepth orders the new channels offset-major, so it is spelled out.)
    """
    shape = op.Shape(x)
    batch_channels = op.Slice(shape, op.Constant(value_ints=[0]), op.Constant(value_ints=[2]))
    spatial = op.Div(
        op.Slice(shape, op.Constant(value_ints=[2]), op.Constant(value_ints=[4])),
        op.Constant(value_ints=[factor]),
    )
    h, w = (
        op.Slice(spatial, op.Constant(value_ints=[i]), op.Constant(value_ints=[i + 1]))
        for i in (0, 1)
    )
    f = op.Constant(value_ints=[factor])
    x = op.Reshape(x, op.Concat(batch_channels, h, f, w, f, axis=0))  # [b, c, h', f, w', f]
    x = op.Transpose(x, perm=[0, 1, 3, 5, 2, 4])  # [b, c, f, f, h', w']
    return op.Reshape(x, op.Concat(op.Constant(value_ints=[0, -1]), spatial, axis=0))


class AdapterResnetBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block1 = Conv2d(channels, channels, 3, padding=1)
        self.block2 = Conv2d(channels, channels, 1)

    def forward(self, op, x):
        return op.Add(self.block2(op, op.Relu(self.block1(op, x))), x)


class AdapterBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, num_res_blocks: int, down: bool):
        super().__init__()
        self.down = down
        self.in_conv = Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None
        self.resnets = nn.ModuleList(
            [AdapterResnetBlock(out_channels) for _ in range(num_res_blocks)]
        )

    def forward(self, op, x):
        if self.down:  # AvgPool2d(2, 2, ceil_mode=True): a partial edge window averages what it has
            x = op.AveragePool(x, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
        if self.in_conv is not None:
            x = self.in_conv(op, x)
        for resnet in self.resnets:
            x = resnet(op, x)
        return x


class FullAdapter(nn.Module):
    def __init__(self, config: T2IAdapterConfig) -> None:
        super().__init__()
        self.factor = config.downscale_factor
        widths = config.channels
        self.conv_in = Conv2d(config.in_channels * self.factor**2, widths[0], 3, padding=1)
        inputs = (widths[0], *widths[:-1]) if config.adapter_type == "full_adapter" else None
        if inputs is None:  # XL: the width changes in the second block, not the first of each pair
            inputs = tuple(widths[i - 1] if i in (1, 2) else widths[i] for i in range(len(widths)))
        self.body = nn.ModuleList(
            [
                AdapterBlock(c_in, c_out, config.num_res_blocks, down)
                for c_in, c_out, down in zip(inputs, widths, config.downsamples(), strict=True)
            ]
        )

    def forward(self, op, condition):
        x = self.conv_in(op, pixel_unshuffle(op, condition, self.factor))
        features = []
        for block in self.body:
            x = block(op, x)
            features.append(x)
        return features


class T2IAdapter(Model):
    """diffusers' ``T2IAdapter`` (``full_adapter`` and ``full_adapter_xl``)."""

    config_class = T2IAdapterConfig
    task = "adapter"

    def __init__(self, config: T2IAdapterConfig) -> None:
        super().__init__()
        self.config = config
        self.adapter = FullAdapter(config)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        outputs = {
            f"features.{i}": ["batch", width, f"feature_height_{i}", f"feature_width_{i}"]
            for i, width in enumerate(c.channels)
        }

        def forward(op, condition):
            return {f"features.{i}": f for i, f in enumerate(self.adapter(op, condition))}

        inputs = {"condition": (None, ["batch", c.in_channels, "height", "width"])}
        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"T2IAdapter": T2IAdapter}
