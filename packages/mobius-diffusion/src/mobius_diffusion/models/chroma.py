"""Chroma's transformer: Flux without the pooled-text and guidance conditioning.

Every modulation vector of every block comes from one table that the distilled
guidance "approximator" (``distilled_guidance_layer``: an MLP of residual
RMSNorm + ``PixArtAlphaTextProjection`` layers) computes from the timestep alone:
row ``r`` of its input is ``[sinusoid(t), sinusoid(0), sinusoid(1000 r)]``.
The table holds, in order: 3 rows per single-stream block, 6 per double-stream
block for the image, 6 per double-stream block for the text, and the final
norm's ``shift, scale``. The norms keep no linear layer of their own
(diffusers' ``...Pruned`` norms); the blocks are otherwise Flux's.

Graph: :class:`mobius.tasks.DenoisingTask`, inputs as diffusers'
``ChromaTransformer2DModel.forward`` names them and the Chroma pipeline passes them:
``hidden_states`` float ``[batch, image_tokens, in_channels]`` (packed latents),
``encoder_hidden_states`` float ``[batch, sequence, joint_attention_dim]`` (T5),
``timestep`` float ``[batch]`` (the pipeline's ``t / 1000``; the graph multiplies
by 1000), ``img_ids`` ``[image_tokens, 3]`` and ``txt_ids`` ``[sequence, 3]`` (the
rotary tables are computed in the graph from them, as Flux's), and
``attention_mask`` float ``[batch, sequence + image_tokens]``, the pipeline's
0/1 mask over ``[text, image]`` tokens. diffusers hands ``m[:, None, :] * m[:, :, None]``
to scaled-dot-product attention as a *float* mask, which is added to the scores
(+1 where both tokens are kept, +0 otherwise) rather than excluding tokens; the
graph adds the same bias, so a mask of ones is the unmasked model.
-> ``out_hidden_states`` ``[batch, image_tokens, patch_size^2 * out_channels]``.
Checkpoints: diffusers' layout (``transformer/`` of ``lodestones/Chroma1-HD``);
the original single-file layout is not read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_int
from mobius_diffusion.models._dit_blocks import (
    AdaLayerNormContinuous,
    AdaLayerNormZero,
    AdaLayerNormZeroSingle,
    AxesRotary,
    JointAttention,
    JointTransformerBlock,
    QKNormAttention,
    TextProjection,
    WeightlessLayerNorm,
    modulate,
)
from mobius_diffusion.models._embeddings import Timesteps
from mobius_diffusion.models.flux import (
    FluxSingleTransformerBlock,
    image_tokens,
    joint_rotary,
    rope_axes,
)
from mobius_diffusion.tasks import GraphSpec

#: torch's ``nn.RMSNorm(eps=None)``: the float32 machine epsilon.
_TORCH_RMS_EPS = float(np.finfo(np.float32).eps)


@dataclass
class ChromaConfig:
    patch_size: int = 1
    in_channels: int = 64
    out_channels: int | None = None
    num_layers: int = 19
    num_single_layers: int = 38
    attention_head_dim: int = 128
    num_attention_heads: int = 24
    joint_attention_dim: int = 4096
    axes_dims_rope: tuple[int, ...] = (16, 56, 56)
    approximator_num_channels: int = 64
    approximator_hidden_dim: int = 5120
    approximator_layers: int = 5

    @classmethod
    def from_hf(cls, config: Any) -> ChromaConfig:
        ints = {
            name: config_int(config, name, default)
            for name, default in (
                ("patch_size", 1),
                ("in_channels", 64),
                ("num_layers", 19),
                ("num_single_layers", 38),
                ("attention_head_dim", 128),
                ("num_attention_heads", 24),
                ("joint_attention_dim", 4096),
                ("approximator_num_channels", 64),
                ("approximator_hidden_dim", 5120),
                ("approximator_layers", 5),
            )
        }
        if ints["approximator_num_channels"] % 8:
            raise ConfigError(
                f"{config.model_type} approximator_num_channels "
                f"{ints['approximator_num_channels']} is not built by mobius: it builds "
                "multiples of 8 (even sinusoids of a quarter of the channels)"
            )
        out_channels = getattr(config, "out_channels", None)
        if out_channels is not None:
            out_channels = config_int(config, "out_channels")
        return cls(out_channels=out_channels, axes_dims_rope=rope_axes(config), **ints)

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def modulation_rows(self) -> int:
        """Rows of the approximator's table: 3 per single block, 12 per double block, 2 at the end."""
        return 3 * self.num_single_layers + 12 * self.num_layers + 2


class MaskedRotary(NamedTuple):
    """What Chroma's blocks hand their attention: the rotary tables and the mask's score bias."""

    tables: tuple  # (cos, sin) [batch, tokens, head_dim / 2]
    bias: Any  # [batch, 1, tokens, tokens]


def _sinusoid(positions: np.ndarray, dim: int) -> np.ndarray:
    """diffusers' ``get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=0)``.

    The rows' positions reach ``1000 * rows`` (343000 for Chroma1), where one float32
    ulp of a frequency moves an angle by 5e-3: the frequencies are rounded from
    float64 as torch's float32 ``exp`` gives them (checked against torch for Chroma's
    16 frequencies), the angles multiplied in float32 as torch does.
    """
    half = dim // 2
    exponent = -math.log(10000) * np.arange(half, dtype=np.float32) / half  # float32
    freqs = np.exp(exponent.astype(np.float64)).astype(np.float32)
    angles = (positions.astype(np.float32)[:, None] * freqs).astype(np.float64)
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


class ChromaCombinedTimestepTextProjEmbeddings(nn.Module):
    """``[batch]`` timesteps -> the approximator's input ``[batch, rows, 4 * channels]``.

    Each row is ``[sinusoid(t), sinusoid(0), sinusoid(1000 * row)]`` (``channels``,
    ``channels``, ``2 * channels`` wide): all but the first part are constants.
    """

    def __init__(self, num_channels: int, out_dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(num_channels, flip_sin_to_cos=True, downscale_freq_shift=0)
        guidance = np.broadcast_to(_sinusoid(np.zeros(1), num_channels), (out_dim, num_channels))
        rows = _sinusoid(np.arange(out_dim) * 1000, 2 * num_channels)
        self.constant = np.concatenate([guidance, rows], axis=1)[None]  # [1, rows, 3 channels]

    def forward(self, op, timestep):
        t_emb = op.Unsqueeze(self.time_proj(op, timestep, timestep), [1])  # [batch, 1, channels]
        rows, width = self.constant.shape[1:]
        batch = op.Shape(timestep, start=0, end=1)
        t_shape = op.Concat(
            batch, op.Constant(value_ints=[rows, self.time_proj.num_channels]), axis=0
        )
        c_shape = op.Concat(batch, op.Constant(value_ints=[rows, width]), axis=0)
        constant = op.CastLike(op.Constant(value=ir.tensor(self.constant)), timestep)
        return op.Concat(op.Expand(t_emb, t_shape), op.Expand(constant, c_shape), axis=2)


class ChromaApproximator(nn.Module):
    """``in_proj``, then residual ``layers[i](norms[i](x))``, then ``out_proj``."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int, n_layers: int) -> None:
        super().__init__()
        self.in_proj = Linear(in_dim, hidden_dim, bias=True)
        self.layers = nn.ModuleList(
            [TextProjection(hidden_dim, hidden_dim, act_fn="silu") for _ in range(n_layers)]
        )
        self.norms = nn.ModuleList([RMSNorm(hidden_dim, _TORCH_RMS_EPS) for _ in range(n_layers)])
        self.out_proj = Linear(hidden_dim, out_dim, bias=True)

    def forward(self, op, x):
        x = self.in_proj(op, x)
        for layer, norm in zip(self.layers, self.norms, strict=True):
            x = op.Add(x, layer(op, norm(op, x)))
        return self.out_proj(op, x)


class _TableModulation:
    """A pruned adaptive norm: its ``chunks`` vectors are rows ``first, first + 1, ...`` of the
    approximator's table ``[batch, rows, dim]`` instead of a linear layer's output."""

    def __init__(self, dim: int, first: int) -> None:
        nn.Module.__init__(self)
        self.norm = WeightlessLayerNorm(dim)
        self.first = first

    def modulation(self, op, table) -> list:
        return [
            op.Gather(table, op.Constant(value=ir.tensor(np.array(row, np.int64))), axis=1)
            for row in range(self.first, self.first + self.chunks)
        ]


class ChromaAdaLayerNormZeroPruned(_TableModulation, AdaLayerNormZero):
    """AdaLayerNormZero on six table rows."""


class ChromaAdaLayerNormZeroSinglePruned(_TableModulation, AdaLayerNormZeroSingle):
    """AdaLayerNormZeroSingle on three table rows."""


class ChromaAdaLayerNormContinuousPruned(_TableModulation, AdaLayerNormContinuous):
    """The final norm on the table's last two rows, ``shift`` first (Flux's has ``scale`` first)."""

    def forward(self, op, x, emb):
        shift, scale = self.modulation(op, emb)
        return modulate(op, self.norm(op, x), shift, scale)


class ChromaJointAttention(JointAttention):
    """Flux's joint attention with the mask's score bias."""

    def forward(self, op, hidden, context, rotary: MaskedRotary):
        return super().forward(op, hidden, context, rotary.tables, rotary.bias)


class ChromaSingleAttention(QKNormAttention):
    """Flux's single-stream attention (no ``to_out``) with the mask's score bias."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__(dim, heads, dim_head, qk_norm=True, pre_only=True)

    def forward(self, op, hidden, rotary: MaskedRotary):
        return self.attend(op, *self.qkv(op, hidden, rotary.tables), rotary.bias)


class ChromaTransformerBlock(JointTransformerBlock):
    """Flux's double-stream block, modulated by table rows ``image_row..`` and ``text_row..``."""

    def __init__(self, dim, heads, dim_head, image_row: int, text_row: int) -> None:
        super().__init__(dim, heads, dim_head, qk_norm=True)
        self.norm1 = ChromaAdaLayerNormZeroPruned(dim, image_row)
        self.norm1_context = ChromaAdaLayerNormZeroPruned(dim, text_row)
        self.attn = ChromaJointAttention(dim, heads, dim_head, qk_norm=True)


class ChromaSingleTransformerBlock(FluxSingleTransformerBlock):
    """Flux's single-stream block, modulated by table rows ``row..row + 2``."""

    def __init__(self, dim: int, heads: int, dim_head: int, row: int) -> None:
        super().__init__(dim, heads, dim_head)
        self.norm = ChromaAdaLayerNormZeroSinglePruned(dim, row)
        self.attn = ChromaSingleAttention(dim, heads, dim_head)


def mask_bias(op, attention_mask, like):
    """``m[:, None, None, :] * m[:, None, :, None]``: the float mask diffusers adds to the scores."""
    mask = op.CastLike(attention_mask, like)
    return op.Mul(op.Unsqueeze(mask, [1, 2]), op.Unsqueeze(mask, [1, 3]))


class ChromaTransformer2DModel(Model):
    """diffusers' ``ChromaTransformer2DModel`` (Chroma1-HD and its tiny relatives)."""

    config_class = ChromaConfig
    task = "denoising"

    def __init__(self, config: ChromaConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        dim, heads, head_dim = c.inner_dim, c.num_attention_heads, c.attention_head_dim
        self.pos_embed = AxesRotary(c.axes_dims_rope)
        self.time_text_embed = ChromaCombinedTimestepTextProjEmbeddings(
            c.approximator_num_channels // 4, c.modulation_rows
        )
        self.distilled_guidance_layer = ChromaApproximator(
            c.approximator_num_channels, dim, c.approximator_hidden_dim, c.approximator_layers
        )
        self.context_embedder = Linear(c.joint_attention_dim, dim, bias=True)
        self.x_embedder = Linear(c.in_channels, dim, bias=True)
        image_rows = 3 * c.num_single_layers
        text_rows = image_rows + 6 * c.num_layers
        self.transformer_blocks = nn.ModuleList(
            [
                ChromaTransformerBlock(dim, heads, head_dim, image_rows + 6 * i, text_rows + 6 * i)
                for i in range(c.num_layers)
            ]
        )
        self.single_transformer_blocks = nn.ModuleList(
            [
                ChromaSingleTransformerBlock(dim, heads, head_dim, 3 * i)
                for i in range(c.num_single_layers)
            ]
        )
        self.norm_out = ChromaAdaLayerNormContinuousPruned(dim, c.modulation_rows - 2)
        self.proj_out = Linear(dim, c.patch_size**2 * self.out_channels, bias=True)

    @property
    def out_channels(self) -> int:
        return self.config.out_channels or self.config.in_channels

    def forward(
        self, op, hidden_states, encoder_hidden_states, timestep, img_ids, txt_ids, attention_mask
    ):
        hidden = self.x_embedder(op, hidden_states)
        timestep = op.Mul(op.CastLike(timestep, hidden), 1000.0)  # the pipeline passes t / 1000
        table = self.distilled_guidance_layer(op, self.time_text_embed(op, timestep))
        context = self.context_embedder(op, encoder_hidden_states)
        rotary = MaskedRotary(
            joint_rotary(op, self.pos_embed, hidden, txt_ids, img_ids),
            mask_bias(op, attention_mask, hidden),
        )
        for block in self.transformer_blocks:
            context, hidden = block(op, hidden, context, table, rotary)
        joint = op.Concat(context, hidden, axis=1)
        for block in self.single_transformer_blocks:
            joint = block(op, joint, table, rotary)
        return self.proj_out(op, self.norm_out(op, image_tokens(op, joint, context), table))

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        axes = len(c.axes_dims_rope)
        inputs = {
            "hidden_states": (None, ["batch", "image_tokens", c.in_channels]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.joint_attention_dim]),
            "timestep": (None, ["batch"]),
            "img_ids": (None, ["image_tokens", axes]),
            "txt_ids": (None, ["sequence", axes]),
            "attention_mask": (None, ["batch", "joint_tokens"]),
        }
        outputs = {
            "out_hidden_states": ["batch", "image_tokens", c.patch_size**2 * self.out_channels]
        }

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"ChromaTransformer2DModel": ChromaTransformer2DModel}
