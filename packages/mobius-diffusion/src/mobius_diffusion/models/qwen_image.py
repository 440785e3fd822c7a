"""Qwen-Image's transformer: an MMDiT of double-stream blocks over text and image tokens.

Image tokens are packed latents (2x2 patches folded into channels by the
pipeline); text tokens are the Qwen2.5-VL states, RMS-normed (``txt_norm``) and
projected (``txt_in``). Every block modulates each stream from ``temb`` (its own
``img_mod``/``txt_mod``), runs one joint attention over ``[text, image]`` with
per-head RMS-normed queries and keys and the 3-axis rotary positions, then each
stream's feed-forward. Only the image tokens leave the last block. Module tree and
names follow diffusers' ``QwenImageTransformer2DModel`` checkpoints.

Rotary positions (``QwenEmbedRope`` with ``scale_rope``), computed in the graph from
``img_shapes``: image ``i`` of ``(frames, rows, columns)`` patches puts its token
``(f, r, c)`` at ``(i + f, r - ceil(rows / 2), c - ceil(columns / 2))``, a centred
grid; the text tokens sit at ``m + j`` on all three axes, ``m`` the largest
``max(rows // 2, columns // 2)`` of the images. Axis ``k`` rotates
``axes_dims_rope[k]`` channels of each head (adjacent pairs, theta 10000).

Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, image_tokens,
in_channels] (packed; the edit pipelines append the condition images' tokens),
``encoder_hidden_states`` [batch, sequence, joint_attention_dim],
``encoder_hidden_states_mask`` int64 [batch, sequence] (1 for a real text token; the
image tokens are never masked), ``timestep`` [batch] (the pipeline's ``t / 1000``),
``img_shapes`` int64 [images, 3] (each image's ``(frames, rows, columns)`` in
patches, in token order: the same for every batch row, as diffusers reads the first
row's) -> ``out_hidden_states`` [batch, image_tokens, patch_size² * out_channels].

``zero_cond_t`` (Qwen-Image-Edit-2511): the tokens of the images after the first
(the edit's condition images) are modulated from the embedding of timestep 0; the
inputs are the same. Not built (refused by name): ``use_additional_t_cond`` and
``use_layer3d_rope`` (Qwen-Image-Layered), ``guidance_embeds`` (diffusers has no
weights for it and its forward is a TODO).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import FeedForward
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    AxesRotary,
    JointAttention,
    WeightlessLayerNorm,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.tasks import GraphSpec

#: Options of diffusers' class that change the graph and that mobius does not build.
_NOT_BUILT = ("use_additional_t_cond", "use_layer3d_rope", "guidance_embeds")


def _ints(op, values):
    return op.Constant(value_ints=list(values))


@dataclass
class QwenImageConfig:
    patch_size: int = 2
    in_channels: int = 64
    out_channels: int = 16
    num_layers: int = 60
    attention_head_dim: int = 128
    num_attention_heads: int = 24
    joint_attention_dim: int = 3584
    axes_dims_rope: tuple[int, ...] = (16, 56, 56)
    zero_cond_t: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> QwenImageConfig:
        for name in _NOT_BUILT:
            if getattr(config, name, False) not in (False, None):
                raise ConfigError(
                    f"QwenImageTransformer2DModel {name}={getattr(config, name)!r} is not built "
                    "by mobius"
                )
        head_dim = config_int(config, "attention_head_dim", 128)
        axes = config_ints(config, "axes_dims_rope", (16, 56, 56), count=3)
        if sum(axes) != head_dim or any(d % 2 for d in axes):
            raise ConfigError(
                f"QwenImageTransformer2DModel axes_dims_rope {axes} must be even and sum to "
                f"attention_head_dim {head_dim}"
            )
        in_channels = config_int(config, "in_channels", 64)
        # diffusers' default out_channels is 16, and None means in_channels.
        out_channels = getattr(config, "out_channels", 16)
        zero_cond_t = getattr(config, "zero_cond_t", False)
        if not isinstance(zero_cond_t, bool):
            raise ConfigError(
                f"QwenImageTransformer2DModel zero_cond_t must be true or false, got {zero_cond_t!r}"
            )
        return cls(
            patch_size=config_int(config, "patch_size", 2),
            in_channels=in_channels,
            out_channels=in_channels
            if out_channels is None
            else config_int(config, "out_channels"),
            num_layers=config_int(config, "num_layers", 60),
            attention_head_dim=head_dim,
            num_attention_heads=config_int(config, "num_attention_heads", 24),
            joint_attention_dim=config_int(config, "joint_attention_dim", 3584),
            axes_dims_rope=axes,
            zero_cond_t=zero_cond_t,
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class QwenTimestepProjEmbeddings(nn.Module):
    """The sinusoid of ``timestep * 1000`` (``t / 1000`` in, as the pipeline passes it), embedded."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000)
        self.timestep_embedder = TimestepEmbedding(256, dim)

    def forward(self, op, timestep, like):
        return self.timestep_embedder(op, self.time_proj(op, op.CastLike(timestep, like), like))


def modulation(dim: int) -> nn.ModuleList:
    """The checkpoint's ``img_mod`` / ``txt_mod``: index 0 is the SiLU, ``1`` the linear."""
    return nn.ModuleList([nn.Module(), Linear(dim, 6 * dim, bias=True)])


def modulation_vectors(op, mod: nn.ModuleList, temb) -> list:
    """``mod[1](silu(temb))`` in six ``[batch, 1, dim]``: (shift, scale, gate) of the attention,
    then of the MLP, to broadcast over the tokens."""
    out = op.Split(mod[1](op, op.Mul(temb, op.Sigmoid(temb))), axis=1, num_outputs=6, _outputs=6)
    return [op.Unsqueeze(v, _ints(op, [1])) for v in out]


def shift_scale(op, x, shift, scale):
    """``x * (1 + scale) + shift``, the vectors already broadcastable to ``x``."""
    return op.Add(op.Mul(x, op.Add(scale, 1.0)), shift)


class QwenImageTransformerBlock(nn.Module):
    """One double-stream block: each stream modulated, joint attention, each stream's MLP."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.img_mod = modulation(dim)
        self.img_norm1 = WeightlessLayerNorm(dim)
        self.attn = JointAttention(dim, heads, dim_head, qk_norm=True)
        self.img_norm2 = WeightlessLayerNorm(dim)
        self.img_mlp = FeedForward(dim, dim, activation_fn="gelu-approximate")
        self.txt_mod = modulation(dim)
        self.txt_norm1 = WeightlessLayerNorm(dim)
        self.txt_norm2 = WeightlessLayerNorm(dim)
        self.txt_mlp = FeedForward(dim, dim, activation_fn="gelu-approximate")

    def image_modulation(self, op, temb, condition) -> list:
        """The image stream's six modulation vectors (``condition``: see the zero-cond variant)."""
        return modulation_vectors(op, self.img_mod, temb)

    def forward(self, op, hidden, context, temb, rotary, bias, condition=None):
        """-> ``(context, hidden)``."""
        img_shift, img_scale, img_gate, img_shift2, img_scale2, img_gate2 = self.image_modulation(
            op, temb, condition
        )
        txt_shift, txt_scale, txt_gate, txt_shift2, txt_scale2, txt_gate2 = modulation_vectors(
            op, self.txt_mod, temb
        )
        img_attn, txt_attn = self.attn(
            op,
            shift_scale(op, self.img_norm1(op, hidden), img_shift, img_scale),
            shift_scale(op, self.txt_norm1(op, context), txt_shift, txt_scale),
            rotary,
            bias,
        )
        hidden = op.Add(hidden, op.Mul(img_gate, img_attn))
        context = op.Add(context, op.Mul(txt_gate, txt_attn))
        img_mlp = self.img_mlp(
            op, shift_scale(op, self.img_norm2(op, hidden), img_shift2, img_scale2)
        )
        txt_mlp = self.txt_mlp(
            op, shift_scale(op, self.txt_norm2(op, context), txt_shift2, txt_scale2)
        )
        return op.Add(context, op.Mul(txt_gate2, txt_mlp)), op.Add(
            hidden, op.Mul(img_gate2, img_mlp)
        )


class ZeroCondQwenImageTransformerBlock(QwenImageTransformerBlock):
    """``zero_cond_t`` (Qwen-Image-Edit-2511): the condition images' tokens are modulated by the
    embedding of timestep 0, the generated image's by the timestep's; the text by the timestep's.

    ``condition`` is ``(temb of timestep 0, generated [1, image_tokens, 1] bool)``.
    """

    def image_modulation(self, op, temb, condition) -> list:
        zero_temb, generated = condition
        return [
            op.Where(generated, v, v0)
            for v, v0 in zip(
                modulation_vectors(op, self.img_mod, temb),
                modulation_vectors(op, self.img_mod, zero_temb),
                strict=True,
            )
        ]


def image_position_ids(op, img_shapes, tokens):
    """``[tokens, 3]`` int64: each packed image token's (frame, row, column), centred grids.

    ``img_shapes [images, 3]`` are the images in token order; token ``t`` belongs to the
    image whose token range holds it (the number of image ends at or before ``t``).
    """
    frames, rows, cols = op.Split(img_shapes, axis=1, num_outputs=3, _outputs=3)
    frames, rows, cols = (op.Squeeze(v, _ints(op, [1])) for v in (frames, rows, cols))
    counts = op.Mul(op.Mul(frames, rows), cols)
    ends = op.CumSum(counts, op.Constant(value_int=0))
    t = op.Range(op.Constant(value_int=0), op.Squeeze(tokens), op.Constant(value_int=1))
    past = op.GreaterOrEqual(op.Unsqueeze(t, _ints(op, [1])), op.Unsqueeze(ends, _ints(op, [0])))
    image = op.ReduceSum(op.Cast(past, to=ir.DataType.INT64), _ints(op, [1]), keepdims=0)
    local = op.Sub(t, op.Gather(op.Sub(ends, counts), image))
    row_count, col_count = op.Gather(rows, image), op.Gather(cols, image)
    frame = op.Add(image, op.Div(local, op.Mul(row_count, col_count)))
    row = op.Mod(op.Div(local, col_count), row_count)
    col = op.Mod(local, col_count)
    # scale_rope: positions -ceil(n/2) .. n//2 - 1 on the rows and the columns
    row = op.Sub(row, op.Sub(row_count, op.Div(row_count, 2)))
    col = op.Sub(col, op.Sub(col_count, op.Div(col_count, 2)))
    return op.Concat(*(op.Unsqueeze(v, _ints(op, [1])) for v in (frame, row, col)), axis=1)


def generated_image_tokens(op, img_shapes, tokens):
    """``[1, tokens, 1]`` bool: whether each image token is the first image's (the one generated)."""
    first = op.ReduceProd(
        op.Slice(img_shapes, _ints(op, [0]), _ints(op, [1]), _ints(op, [0])), keepdims=0
    )
    t = op.Range(op.Constant(value_int=0), op.Squeeze(tokens), op.Constant(value_int=1))
    return op.Unsqueeze(op.Less(t, first), _ints(op, [0, 2]))


def text_position_ids(op, img_shapes, sequence):
    """``[sequence, 3]`` int64: ``m + j`` on every axis, ``m`` the images' largest half side."""
    halves = op.Div(op.Slice(img_shapes, _ints(op, [1]), _ints(op, [3]), _ints(op, [1])), 2)
    start = op.ReduceMax(halves, keepdims=0)
    j = op.Range(start, op.Add(start, op.Squeeze(sequence)), op.Constant(value_int=1))
    return op.Expand(op.Unsqueeze(j, _ints(op, [1])), _ints(op, [1, 3]))


def text_padding_bias(op, encoder_hidden_states_mask, hidden, joint_tokens):
    """``[batch, 1, joint, joint]``: the lowest float on padded text keys, 0 elsewhere.

    As diffusers' boolean mask (padding gets no weight); the image keys are real.
    """
    image_keep = op.Expand(
        op.Constant(value=ir.tensor(np.array([[True]]))),
        op.Concat(op.Shape(hidden, start=0, end=1), op.Shape(hidden, start=1, end=2), axis=0),
    )
    keep = op.Concat(op.Cast(encoder_hidden_states_mask, to=ir.DataType.BOOL), image_keep, axis=1)
    low = op.CastLike(op.Constant(value_float=float(np.finfo(np.float32).min)), hidden)
    bias = op.Where(op.Unsqueeze(keep, _ints(op, [1, 2])), op.CastLike(0.0, hidden), low)
    return op.Expand(bias, op.Concat(_ints(op, [1, 1]), joint_tokens, _ints(op, [1]), axis=0))


class QwenImageTransformer2DModel(Model):
    """diffusers' ``QwenImageTransformer2DModel`` (Qwen-Image, Qwen-Image-Edit, 2509 and 2511)."""

    config_class = QwenImageConfig
    task = "denoising"

    def __init__(self, config: QwenImageConfig) -> None:
        super().__init__()
        self.config = config
        dim, heads, head_dim = (
            config.inner_dim,
            config.num_attention_heads,
            config.attention_head_dim,
        )
        self.pos_embed = AxesRotary(config.axes_dims_rope)
        self.time_text_embed = QwenTimestepProjEmbeddings(dim)
        self.txt_norm = RMSNorm(config.joint_attention_dim, 1e-6)
        self.img_in = Linear(config.in_channels, dim, bias=True)
        self.txt_in = Linear(config.joint_attention_dim, dim, bias=True)
        block = (
            ZeroCondQwenImageTransformerBlock if config.zero_cond_t else QwenImageTransformerBlock
        )
        self.transformer_blocks = nn.ModuleList(
            [block(dim, heads, head_dim) for _ in range(config.num_layers)]
        )
        self.norm_out = AdaLayerNormContinuous(dim)
        self.proj_out = Linear(dim, config.patch_size**2 * config.out_channels, bias=True)

    def forward(
        self,
        op,
        hidden_states,
        encoder_hidden_states,
        encoder_hidden_states_mask,
        timestep,
        img_shapes,
    ):
        hidden = self.img_in(op, hidden_states)
        temb = self.time_text_embed(op, timestep, hidden)
        context = self.txt_in(op, self.txt_norm(op, encoder_hidden_states))
        sequence = op.Shape(context, start=1, end=2)
        image_tokens = op.Shape(hidden, start=1, end=2)
        # One (cos, sin) row per token of [text, image], repeated for each batch row.
        ids = op.Concat(
            text_position_ids(op, img_shapes, sequence),
            image_position_ids(op, img_shapes, image_tokens),
            axis=0,
        )
        cos, sin = self.pos_embed(op, ids)
        rows = op.Concat(op.Shape(hidden, start=0, end=1), op.Shape(cos), axis=0)
        rotary = (
            op.Expand(op.CastLike(cos, hidden), rows),
            op.Expand(op.CastLike(sin, hidden), rows),
        )
        bias = text_padding_bias(
            op, encoder_hidden_states_mask, hidden, op.Add(sequence, image_tokens)
        )
        condition = None
        if self.config.zero_cond_t:
            zero_temb = self.time_text_embed(op, op.Mul(timestep, 0.0), hidden)
            condition = (zero_temb, generated_image_tokens(op, img_shapes, image_tokens))
        for block in self.transformer_blocks:
            context, hidden = block(op, hidden, context, temb, rotary, bias, condition)
        return self.proj_out(op, self.norm_out(op, hidden, temb))

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", "image_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "encoder_hidden_states_mask": (ir.DataType.INT64, ["batch", "sequence"]),
            "timestep": (None, ["batch"]),
            "img_shapes": (ir.DataType.INT64, ["images", 3]),
        }
        outputs = {"out_hidden_states": ["batch", "image_tokens", c.patch_size**2 * c.out_channels]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"QwenImageTransformer2DModel": QwenImageTransformer2DModel}
