"""WanVACETransformer3DModel: Wan with VACE's control branch (video editing, control videos,
reference images), what diffusers' ``WanVACEPipeline`` denoises with.

Everything of :mod:`mobius_diffusion.models.wan` stays; VACE adds a second patch embedding
(``vace_patch_embedding``) for the control latents and one ``vace_blocks`` entry per layer of
``vace_layers``. The control tokens (zero-padded at the end to the video's token count) run
through the VACE blocks first, each a Wan block on the control stream with the video's
modulation, rotary positions and text: the first adds ``proj_in(control)`` to the video's
embedded tokens, each ends in ``proj_out`` giving a hint. Then the Wan blocks run, and after
the ``k``-th of the ``vace_layers`` (in layer order) the ``k``-th hint, times the ``k``-th
``control_hidden_states_scale``, is added to the video tokens.

Graph (:class:`mobius.tasks.DenoisingTask`): Wan's inputs and ``control_hidden_states``
[batch, vace_in_channels, control_frames, latent_height, latent_width] (the pipeline's
conditioning latents) and ``control_hidden_states_scale`` [len(vace_layers)] (its
``conditioning_scale``) -> ``out_hidden_states``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv3d, Linear
from mobius.errors import ConfigError
from mobius_diffusion.models.wan import (
    WanConfig,
    WanTransformer3DModel,
    WanTransformerBlock,
    _ints,
    positive_int,
)


@dataclass
class WanVACEConfig(WanConfig):
    vace_layers: tuple[int, ...] = (0, 5, 10, 15, 20, 25, 30, 35)
    vace_in_channels: int = 96

    @classmethod
    def from_hf(cls, config: Any) -> WanVACEConfig:
        c = super().from_hf(config)
        positive_int("Wan VACE transformer", "vace_in_channels", c.vace_in_channels)
        layers = c.vace_layers
        if (
            not isinstance(layers, (list, tuple))
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers)
            or len(set(layers)) != len(layers)
            or 0 not in layers
            or not all(0 <= i < c.num_layers for i in layers)
        ):
            raise ConfigError(
                f"Wan VACE transformer: vace_layers must be distinct layer indices below "
                f"num_layers {c.num_layers}, 0 among them, not {layers!r}"
            )
        c.vace_layers = tuple(layers)
        return c


class WanVACETransformerBlock(WanTransformerBlock):
    """A Wan block over the control tokens; ``proj_in`` (the first only) adds the video's
    tokens to them first, ``proj_out`` makes the hint."""

    def __init__(self, c: WanVACEConfig, apply_input_projection: bool) -> None:
        super().__init__(c)
        dim = c.inner_dim
        self.proj_in = Linear(dim, dim, bias=True) if apply_input_projection else None
        self.proj_out = Linear(dim, dim, bias=True)

    def forward(self, op, hidden, control, context, image, modulation, rotary):
        """-> ``(hint, control)``, both ``[batch, tokens, dim]``."""
        if self.proj_in is not None:
            control = op.Add(self.proj_in(op, control), hidden)
        control = super().forward(op, control, context, image, modulation, rotary)
        return self.proj_out(op, control), control


class WanVACETransformer3DModel(WanTransformer3DModel):
    """diffusers' ``WanVACETransformer3DModel``; see the module docstring for the graph."""

    config_class = WanVACEConfig

    def __init__(self, config: WanVACEConfig) -> None:
        super().__init__(config)
        c = config
        self.vace_patch_embedding = Conv3d(
            c.vace_in_channels, c.inner_dim, c.patch_size, stride=c.patch_size
        )
        self.vace_blocks = nn.ModuleList(
            [WanVACETransformerBlock(c, i == 0) for i in range(len(c.vace_layers))]
        )

    def control_tokens(self, op, control, hidden):
        """``[b, C, F', H, W]`` -> ``[b, tokens, dim]``: zeros after the control's own tokens."""
        x = self.vace_patch_embedding(op, control)
        x = op.Transpose(op.Reshape(x, _ints(op, [0, 0, -1])), perm=[0, 2, 1])
        missing = op.Sub(op.Shape(hidden, start=1, end=2), op.Shape(x, start=1, end=2))
        return op.Pad(x, op.Concat(_ints(op, [0, 0, 0, 0]), missing, _ints(op, [0]), axis=0))

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        timestep,
        control_hidden_states,
        control_hidden_states_scale,
        encoder_hidden_states_image=None,
    ):
        c = self.config
        hidden, grid = self.patches(op, hidden_states)
        rotary = self.rotary(op, hidden, grid)
        temb, modulation, context, image = self.conditions(
            op, timestep, encoder_hidden_states, encoder_hidden_states_image, grid
        )
        control = self.control_tokens(op, control_hidden_states, hidden)
        hints = []
        for i, block in enumerate(self.vace_blocks):
            hint, control = block(op, hidden, control, context, image, modulation, rotary)
            scale = op.Slice(control_hidden_states_scale, _ints(op, [i]), _ints(op, [i + 1]))
            hints.append(op.Mul(hint, scale))
        # diffusers hands the hints out in layer order, whatever the order of vace_layers
        hint_after = dict(zip(sorted(c.vace_layers), hints, strict=True))
        for i, block in enumerate(self.blocks):
            hidden = block(op, hidden, context, image, modulation, rotary)
            if i in hint_after:
                hidden = op.Add(hidden, hint_after[i])
        return self.output(op, hidden, temb, grid)

    def graph_inputs(self) -> dict:
        c = self.config
        inputs = super().graph_inputs()
        control = ["batch", c.vace_in_channels, "control_frames", "latent_height", "latent_width"]
        inputs["control_hidden_states"] = (None, control)
        inputs["control_hidden_states_scale"] = (None, [len(c.vace_layers)])
        return inputs


MODEL_TYPES = {"WanVACETransformer3DModel": WanVACETransformer3DModel}
