"""SkyReelsV2Transformer3DModel: SkyReels-V2's video denoiser, Wan 2.1's transformer and what
SkyReels adds to it (T2V, I2V, and the diffusion-forcing models).

The weights and blocks are :mod:`mobius_diffusion.models.wan`'s. What differs:

- the timestep sinusoid is computed in float64 (diffusers' ``get_1d_sincos_pos_embed_from_grid``)
  before the float32 ``time_embedder``;
- ``inject_sample_info``: an ``fps`` input (0 for 16 fps, 1 otherwise: the diffusion-forcing
  pipelines' encoding) looks up ``fps_embedding`` and adds ``fps_projection`` of it to every
  block's modulation;
- ``num_frame_per_block`` > 1: self-attention is block-causal, a token sees the tokens of
  its own block of frames and of the blocks before;
- diffusion forcing (the ``SkyReelsV2DiffusionForcing*`` pipelines' per-frame noise levels)
  is built when the component's ``config.json`` says ``"diffusion_forcing": true`` (mobius'
  own field, like Wan's ``expand_timesteps``: diffusers takes it as a call argument);
  ``timestep`` is then ``[batch, frame_patches]``, each frame's step modulating its tokens.

Graph (:class:`mobius.tasks.DenoisingTask`): Wan's inputs, ``timestep`` [batch] or
[batch, frame_patches], and with ``inject_sample_info`` ``fps`` int64 [batch] ->
``out_hidden_states``. diffusers adds the fps term correctly only for a batch of one with
diffusion forcing (the pipelines call it so); the graph adds each row's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding
from mobius.errors import ConfigError
from mobius_diffusion.models._attention import FeedForward
from mobius_diffusion.models.wan import (
    WanConfig,
    WanTimeTextImageEmbedding,
    WanTransformer3DModel,
    _ints,
    positive_int,
)


@dataclass
class SkyReelsV2Config(WanConfig):
    inject_sample_info: bool = False
    num_frame_per_block: int = 1
    #: mobius' own field (see the module docstring): ``timestep`` per frame.
    diffusion_forcing: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> SkyReelsV2Config:
        c = super().from_hf(config)
        for name in ("inject_sample_info", "diffusion_forcing"):
            if not isinstance(getattr(c, name), bool):
                raise ConfigError(f"SkyReels-V2 transformer: {name} must be a boolean")
        positive_int("SkyReels-V2 transformer", "num_frame_per_block", c.num_frame_per_block)
        if c.expand_timesteps:
            raise ConfigError(
                "SkyReels-V2 transformer: expand_timesteps is Wan 2.2's; per-frame timesteps "
                "are diffusion_forcing"
            )
        if c.freq_dim % 2:
            raise ConfigError("SkyReels-V2 transformer: freq_dim must be even (sin | cos)")
        return c


class SkyReelsV2Timesteps(nn.Module):
    """The sinusoid ``cos | sin`` of ``t * 10000^(-i / half)``, in float64 as diffusers'."""

    def __init__(self, num_channels: int) -> None:
        super().__init__()
        half = num_channels // 2
        self.freqs = 1.0 / 10000 ** (np.arange(half, dtype=np.float64) / half)

    def forward(self, op, timesteps, like):
        """``timesteps`` [n] -> ``[n, num_channels]`` in ``like``'s dtype."""
        steps = op.Unsqueeze(op.Cast(timesteps, to=ir.DataType.DOUBLE), _ints(op, [1]))
        args = op.Mul(steps, op.Constant(value=ir.tensor(self.freqs)))
        return op.CastLike(op.Concat(op.Cos(args), op.Sin(args), axis=-1), like)


class SkyReelsV2TimeTextImageEmbedding(WanTimeTextImageEmbedding):
    def __init__(self, c: SkyReelsV2Config) -> None:
        super().__init__(c)
        self.timesteps_proj = SkyReelsV2Timesteps(c.freq_dim)


class SkyReelsV2Transformer3DModel(WanTransformer3DModel):
    """diffusers' ``SkyReelsV2Transformer3DModel``; see the module docstring for the graph."""

    config_class = SkyReelsV2Config

    def __init__(self, config: SkyReelsV2Config) -> None:
        super().__init__(config)
        c, dim = config, config.inner_dim
        self.condition_embedder = SkyReelsV2TimeTextImageEmbedding(c)
        self.fps_embedding = self.fps_projection = None
        if c.inject_sample_info:
            self.fps_embedding = Embedding(2, dim)
            self.fps_projection = FeedForward(dim, 6 * dim, mult=1, activation_fn="linear-silu")

    def per_token(self, op, x, grid):
        """``[b, frames, ...]`` -> ``[b, tokens, ...]``: each frame's row for each of its tokens."""
        per_frame = op.ReduceProd(op.Slice(grid, _ints(op, [1]), _ints(op, [3])), keepdims=1)
        x = op.Unsqueeze(x, _ints(op, [2]))  # [b, frames, 1, ...]
        rest = op.Shape(x, start=3)
        x = op.Expand(x, op.Concat(op.Shape(x, end=2), per_frame, rest, axis=0))
        return op.Reshape(x, op.Concat(_ints(op, [0, -1]), rest, axis=0))

    def conditions(self, op, timestep, text, image, grid, fps=None):
        """Wan's, with ``fps``'s projection added to the modulation (``inject_sample_info``)
        and, with diffusion forcing, each frame's ``temb`` and modulation given to its tokens."""
        c = self.config
        steps = timestep if c.diffusion_forcing else op.Unsqueeze(timestep, _ints(op, [1]))
        temb, modulation, context, image = self.condition_embedder(op, steps, text, image)
        if self.fps_embedding is not None:
            sample_info = self.fps_projection(op, self.fps_embedding(op, fps))  # [b, 6 * dim]
            modulation = op.Add(modulation, op.Unsqueeze(sample_info, _ints(op, [1])))
        modulation = op.Reshape(modulation, _ints(op, [0, 0, 6, c.inner_dim]))
        if c.diffusion_forcing:
            temb, modulation = self.per_token(op, temb, grid), self.per_token(op, modulation, grid)
        return temb, modulation, context, image

    def causal_bias(self, op, grid):
        """``[1, 1, tokens, tokens]``: 0 where the key's block of frames is not after the
        query's, -inf elsewhere."""
        per_frame = op.ReduceProd(op.Slice(grid, _ints(op, [1]), _ints(op, [3])), keepdims=0)
        tokens = op.ReduceProd(grid, keepdims=0)
        index = op.Range(op.Constant(value_int=0), tokens, op.Constant(value_int=1))
        block = op.Div(
            op.Div(index, per_frame), op.Constant(value_int=self.config.num_frame_per_block)
        )
        seen = op.LessOrEqual(
            op.Unsqueeze(block, _ints(op, [0])), op.Unsqueeze(block, _ints(op, [1]))
        )
        zero = op.Constant(value_float=0.0)
        bias = op.Where(seen, zero, op.Constant(value_float=-np.inf))
        return op.Unsqueeze(bias, _ints(op, [0, 1]))

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        timestep,
        encoder_hidden_states_image=None,
        fps=None,
    ):
        hidden, grid = self.patches(op, hidden_states)
        rotary = self.rotary(op, hidden, grid)
        temb, modulation, context, image = self.conditions(
            op, timestep, encoder_hidden_states, encoder_hidden_states_image, grid, fps
        )
        bias = None
        if self.config.num_frame_per_block > 1:
            bias = op.CastLike(self.causal_bias(op, grid), hidden)
        for block in self.blocks:
            hidden = block(op, hidden, context, image, modulation, rotary, bias)
        return self.output(op, hidden, temb, grid)

    def graph_inputs(self) -> dict:
        c = self.config
        inputs = super().graph_inputs()
        if c.diffusion_forcing:
            inputs["timestep"] = (None, ["batch", "frame_patches"])
        if c.inject_sample_info:
            inputs["fps"] = (ir.DataType.INT64, ["batch"])
        return inputs


MODEL_TYPES = {"SkyReelsV2Transformer3DModel": SkyReelsV2Transformer3DModel}
