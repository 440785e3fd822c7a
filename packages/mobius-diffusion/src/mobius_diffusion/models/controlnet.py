"""ControlNetModel: a copy of the UNet's down path that turns a condition image into UNet residuals.

The condition image goes through ``controlnet_cond_embedding`` (convs, SiLU,
stride-2 steps down to the latent size) and is added to ``conv_in``'s output; the
UNet's down and mid blocks (:class:`~.unet_2d_condition.UNetEncoder`) follow; a
1x1 conv per skip (``controlnet_down_blocks.{i}``) and one for the mid-block
output (``controlnet_mid_block``) make the residuals, times ``conditioning_scale``.

Graph (:class:`mobius.tasks.ControlNetTask`): the UNet's inputs (``sample``,
``timestep`` float32 [batch], ``encoder_hidden_states``, SDXL's ``text_embeds`` and
``time_ids``) plus ``controlnet_cond`` [batch, conditioning_channels, height,
width] and ``conditioning_scale`` (a scalar in the build dtype) ->
``down_block_res_samples.{i}`` (one per UNet skip, in the UNet's order) and
``mid_block_res_sample``. diffusers' ``guess_mode`` (per-residual log-spaced scales)
is a call option left out: the pipeline can scale the outputs itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, get_activation
from mobius.errors import ConfigError
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models._resnet import UNetMidBlock2D
from mobius_diffusion.models.unet_2d_condition import UNet2DConditionConfig, UNetEncoder
from mobius_diffusion.tasks import GraphSpec

_UP = {"CrossAttnDownBlock2D": "CrossAttnUpBlock2D", "DownBlock2D": "UpBlock2D"}


@dataclass
class ControlNetConfig(UNet2DConditionConfig):
    conditioning_channels: int = 3
    conditioning_embedding_out_channels: tuple[int, ...] = (16, 32, 96, 256)
    bgr: bool = False
    global_pool_conditions: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> ControlNetConfig:
        fields = dict(config.to_dict())
        order = fields.get("controlnet_conditioning_channel_order", "rgb")
        if order not in ("rgb", "bgr"):
            raise ConfigError(f"ControlNet channel order {order!r} is not built by mobius")
        # The UNet's reader, over the fields a ControlNet shares with it: no up path, a
        # fixed time embedding width, num_attention_heads overriding attention_head_dim.
        if fields.get("num_attention_heads") is not None:
            fields["attention_head_dim"] = fields.pop("num_attention_heads")
        mid = fields.get("mid_block_type", "UNetMidBlock2DCrossAttn")
        if mid not in ("UNetMidBlock2DCrossAttn", "UNetMidBlock2D"):
            raise ConfigError(f"ControlNet mid_block_type {mid!r} is not built by mobius")
        fields.update(
            up_block_types=[_UP.get(t, t) for t in reversed(fields["down_block_types"])],
            out_channels=fields.get("in_channels", 4),
            mid_block_type="UNetMidBlock2DCrossAttn",
        )
        base = UNet2DConditionConfig.from_hf(ComponentConfig(fields))
        if base.encoder_hid_dim_type is not None or base.addition_embed_type == "image":
            raise ConfigError(
                "ControlNet image conditioning (encoder_hid_dim_type, addition_embed_type "
                "'image') is not built by mobius"
            )
        base.mid_block_type = mid
        return cls(
            **vars(base),
            conditioning_channels=fields.get("conditioning_channels", 3),
            conditioning_embedding_out_channels=tuple(
                fields.get("conditioning_embedding_out_channels", (16, 32, 96, 256))
            ),
            bgr=order == "bgr",
            global_pool_conditions=fields.get("global_pool_conditions", False),
        )


class ControlNetConditioningEmbedding(nn.Module):
    """``conv_in``, then (3x3 conv, stride-2 3x3 conv) per width step, SiLU after each; ``conv_out``."""

    def __init__(self, out_channels: int, in_channels: int, widths: tuple[int, ...]) -> None:
        super().__init__()
        self.conv_in = Conv2d(in_channels, widths[0], 3, padding=1)
        blocks = []
        for c_in, c_out in zip(widths[:-1], widths[1:], strict=True):
            blocks += [
                Conv2d(c_in, c_in, 3, padding=1),
                Conv2d(c_in, c_out, 3, stride=2, padding=1),
            ]
        self.blocks = nn.ModuleList(blocks)
        self.conv_out = Conv2d(widths[-1], out_channels, 3, padding=1)

    def forward(self, op, x):
        silu = get_activation("silu")
        x = silu(op, self.conv_in(op, x))
        for block in self.blocks:
            x = silu(op, block(op, x))
        return self.conv_out(op, x)


class ControlNetModel(UNetEncoder):
    """diffusers' ``ControlNetModel`` (SD 1.x/2.x and SDXL layouts)."""

    config_class = ControlNetConfig
    task = "controlnet"

    def __init__(self, config: ControlNetConfig) -> None:
        super().__init__(config)
        widths = config.block_out_channels
        self.controlnet_cond_embedding = ControlNetConditioningEmbedding(
            widths[0], config.conditioning_channels, config.conditioning_embedding_out_channels
        )
        self.controlnet_down_blocks = nn.ModuleList([Conv2d(c, c, 1) for c in self.skip_widths()])
        self.controlnet_mid_block = Conv2d(widths[-1], widths[-1], 1)

    def make_mid_block(self, c: ControlNetConfig) -> UNetMidBlock2D:
        if c.mid_block_type == "UNetMidBlock2DCrossAttn":
            return super().make_mid_block(c)
        return UNetMidBlock2D(  # a single resnet
            c.block_out_channels[-1],
            c.time_embed_dim,
            c.norm_num_groups,
            c.norm_eps,
            c.act_fn,
            num_layers=0,
            add_attention=False,
            output_scale_factor=c.mid_block_scale_factor,
            time_embedding_norm=c.resnet_time_scale_shift,
        )

    def forward(
        self,
        op,
        sample,
        timestep,
        encoder_hidden_states,
        controlnet_cond,
        conditioning_scale,
        **added,
    ):
        emb = self.embed_time(op, sample, timestep, added.get("text_embeds"), added.get("time_ids"))
        if self.config.bgr:  # diffusers flips the channels to RGB
            controlnet_cond = op.Slice(controlnet_cond, [-1], [-(2**63)], [1], [-1])
        x = op.Add(self.conv_in(op, sample), self.controlnet_cond_embedding(op, controlnet_cond))
        x, skips = self.down(op, x, emb, encoder_hidden_states)
        outputs = {
            f"down_block_res_samples.{i}": block(op, skip)
            for i, (skip, block) in enumerate(zip(skips, self.controlnet_down_blocks, strict=True))
        }
        outputs["mid_block_res_sample"] = self.controlnet_mid_block(op, x)
        for name, value in outputs.items():
            value = op.Mul(value, conditioning_scale)
            if self.config.global_pool_conditions:
                value = op.ReduceMean(value, op.Constant(value_ints=[2, 3]), keepdims=1)
            outputs[name] = value
        return outputs

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = self.graph_inputs()
        inputs["controlnet_cond"] = (None, ["batch", c.conditioning_channels, "height", "width"])
        inputs["conditioning_scale"] = (None, [])
        pooled = c.global_pool_conditions
        outputs = {
            f"down_block_res_samples.{i}": [
                "batch",
                width,
                1 if pooled else f"res_height_{i}",
                1 if pooled else f"res_width_{i}",
            ]
            for i, width in enumerate(self.skip_widths())
        }
        outputs["mid_block_res_sample"] = [
            "batch",
            c.block_out_channels[-1],
            1 if pooled else "mid_height",
            1 if pooled else "mid_width",
        ]
        return {"model": GraphSpec(inputs, outputs, lambda op, **inputs: self(op, **inputs))}


MODEL_TYPES = {"ControlNetModel": ControlNetModel}
