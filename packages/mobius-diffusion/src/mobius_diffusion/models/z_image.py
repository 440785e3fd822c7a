"""Z-Image's transformer: Lumina 2's single-stream sandwich blocks, image first, pad tokens.

As Lumina Image 2.0 (:mod:`~mobius_diffusion.models.lumina2`): a modulated "noise refiner"
over the image patches, an unmodulated "context refiner" over the caption (RMS-normed,
projected Qwen3 states), then joint blocks; RMS norms before and after attention and the
SwiGLU, ``tanh``-gated residuals, per-head q/k RMS norms, a 3-axis RoPE on adjacent pairs.
What differs: the modulation is a ``Linear`` of the timestep embedding itself (no SiLU but
in the final layer's), the timestep is ``t * t_scale`` into a 1024-wide MLP
(``t_embedder.mlp``), attention is multi-head (diffusers ignores ``n_kv_heads``: a config
where it differs is refused), the joint sequence is [image, caption], and each sequence is
padded to a multiple of 32 with a learned token (``x_pad_token``, ``cap_pad_token``) that is
attended to like any other. Caption token ``j`` sits at ``(1 + j, 0, 0)``; image patch
``(r, c)`` at ``(L' + 1, r, c)``, ``L'`` the caption's padded length; image pad tokens at 0.

diffusers takes a list of captions of their own lengths and batches them padded, masked;
here row ``i`` of the caption input holds its ``sum(mask[i])`` real tokens first (the runner
packs them so), and tokens past its padded length are masked keys, dropped from the output.

Module tree and names follow diffusers' checkpoints (``all_x_embedder.2-1`` included).
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, channels,
latent_height, latent_width], ``timestep`` [batch] (the pipeline's ``(1000 - t) / 1000``),
``encoder_hidden_states`` [batch, sequence, cap_feat_dim], ``encoder_attention_mask`` int64
[batch, sequence] -> ``out_hidden_states`` like ``hidden_states`` (the pipeline negates it).
``axes_lens`` only bounds diffusers' RoPE table; the graph computes the angles (float32).
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
from mobius_diffusion.models._checks import config_float, config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    AxesRotary,
    QKNormAttention,
    WeightlessLayerNorm,
    _ints,
    per_token,
    unpatchify,
)
from mobius_diffusion.models._embeddings import Timesteps
from mobius_diffusion.models.lumina2 import image_positions, patchify
from mobius_diffusion.models.pixart import caption_bias
from mobius_diffusion.tasks import GraphSpec

#: diffusers' fixed constants: modulation width cap, sequence padding, q/k norm eps.
ADALN_EMBED_DIM = 256
SEQ_MULTI_OF = 32
QK_NORM_EPS = 1e-5
TIME_MLP_DIM = 1024


@dataclass
class ZImageConfig:
    patch_size: int = 2
    in_channels: int = 16
    dim: int = 3840
    n_layers: int = 30
    n_refiner_layers: int = 2
    n_heads: int = 30
    norm_eps: float = 1e-5
    qk_norm: bool = True
    cap_feat_dim: int = 2560
    rope_theta: float = 256.0
    t_scale: float = 1000.0
    axes_dims: tuple[int, ...] = (32, 48, 48)

    @classmethod
    def from_hf(cls, config: Any) -> ZImageConfig:
        name = config.model_type
        patches = config_ints(config, "all_patch_size", (2,))
        frames = config_ints(config, "all_f_patch_size", (1,), count=len(patches))
        if len(patches) != 1 or frames != (1,):
            raise ConfigError(
                f"{name} all_patch_size {list(patches)} / all_f_patch_size {list(frames)}: "
                "mobius builds one image patch size (all_f_patch_size [1])"
            )
        if getattr(config, "siglip_feat_dim", None) is not None:
            raise ConfigError(f"{name} siglip_feat_dim (Z-Image Omni) is not built by mobius")
        dim, heads = config_int(config, "dim", 3840), config_int(config, "n_heads", 30)
        kv_heads = config_int(config, "n_kv_heads", heads)
        if kv_heads != heads:  # diffusers builds n_heads keys and values whatever it says
            raise ConfigError(f"{name} n_kv_heads {kv_heads} differs from n_heads {heads}")
        axes = config_ints(config, "axes_dims", (32, 48, 48), count=3)
        if dim % heads or sum(axes) != dim // heads or any(d % 2 for d in axes):
            raise ConfigError(
                f"{name} axes_dims {list(axes)} must be even and sum to the head dim "
                f"(dim {dim} / n_heads {heads})"
            )
        qk_norm = getattr(config, "qk_norm", True)
        if not isinstance(qk_norm, bool):
            raise ConfigError(f"{name} qk_norm must be true or false, got {qk_norm!r}")
        return cls(
            patch_size=patches[0],
            in_channels=config_int(config, "in_channels", 16),
            dim=dim,
            n_layers=config_int(config, "n_layers", 30),
            n_refiner_layers=config_int(config, "n_refiner_layers", 2, low=0),
            n_heads=heads,
            norm_eps=config_float(config, "norm_eps", 1e-5),
            qk_norm=qk_norm,
            cap_feat_dim=config_int(config, "cap_feat_dim", 2560),
            rope_theta=config_float(config, "rope_theta", 256.0),
            t_scale=config_float(config, "t_scale", 1000.0),
            axes_dims=axes,
        )

    @property
    def adaln_dim(self) -> int:
        return min(self.dim, ADALN_EMBED_DIM)

    @property
    def patch_key(self) -> str:
        """diffusers' ``ModuleDict`` key of the patch embedder and final layer."""
        return f"{self.patch_size}-1"


class ZImageAttention(QKNormAttention):
    """No biases, optional per-head RMS norms, RoPE; ``bias`` an additive key mask or None."""

    def forward(self, op, hidden, rotary, bias):
        return self.to_out[0](op, self.attend(op, *self.qkv(op, hidden, rotary), bias))


class FeedForward(nn.Module):
    """SwiGLU with no biases: ``w2(silu(w1(x)) * w3(x))``, ``int(dim / 3 * 8)`` wide."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        hidden = int(dim / 3 * 8)
        self.w1 = Linear(dim, hidden, bias=False)
        self.w2 = Linear(hidden, dim, bias=False)
        self.w3 = Linear(dim, hidden, bias=False)

    def forward(self, op, x):
        gate = self.w1(op, x)
        return self.w2(op, op.Mul(op.Mul(gate, op.Sigmoid(gate)), self.w3(op, x)))


class ZImageTransformerBlock(nn.Module):
    """Sandwich RMS norms; with ``modulation``, scales and ``tanh`` gates from ``temb``."""

    def __init__(self, config: ZImageConfig, modulation: bool) -> None:
        super().__init__()
        c, dim = config, config.dim
        self.attention = ZImageAttention(
            dim, c.n_heads, dim // c.n_heads, c.qk_norm, QK_NORM_EPS, bias=False
        )
        self.feed_forward = FeedForward(dim)
        self.attention_norm1 = RMSNorm(dim, c.norm_eps)
        self.ffn_norm1 = RMSNorm(dim, c.norm_eps)
        self.attention_norm2 = RMSNorm(dim, c.norm_eps)
        self.ffn_norm2 = RMSNorm(dim, c.norm_eps)
        self.adaLN_modulation = (
            nn.ModuleList([Linear(c.adaln_dim, 4 * dim, bias=True)]) if modulation else None
        )

    def forward(self, op, x, rotary, bias, temb=None):
        if self.adaLN_modulation is None:
            attn = self.attention(op, self.attention_norm1(op, x), rotary, bias)
            x = op.Add(x, self.attention_norm2(op, attn))
            return op.Add(x, self.ffn_norm2(op, self.feed_forward(op, self.ffn_norm1(op, x))))
        mod = self.adaLN_modulation[0](op, temb)  # no SiLU: temb is the MLP's output
        scale_msa, gate_msa, scale_mlp, gate_mlp = (
            per_token(op, v) for v in op.Split(mod, axis=1, num_outputs=4, _outputs=4)
        )
        normed = op.Mul(self.attention_norm1(op, x), op.Add(scale_msa, 1.0))
        attn = self.attention_norm2(op, self.attention(op, normed, rotary, bias))
        x = op.Add(x, op.Mul(op.Tanh(gate_msa), attn))
        ff = self.feed_forward(op, op.Mul(self.ffn_norm1(op, x), op.Add(scale_mlp, 1.0)))
        return op.Add(x, op.Mul(op.Tanh(gate_mlp), self.ffn_norm2(op, ff)))


class TimestepEmbedder(nn.Module):
    """``mlp`` (Linear, SiLU, Linear) over the flipped sinusoid of 256 of ``t``."""

    def __init__(self, out_dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0.0)
        self.mlp = nn.ModuleList(
            [
                Linear(256, TIME_MLP_DIM, bias=True),
                nn.Module(),
                Linear(TIME_MLP_DIM, out_dim, bias=True),
            ]
        )

    def forward(self, op, t, like):
        x = self.mlp[0](op, self.time_proj(op, t, like))
        return self.mlp[2](op, op.Mul(x, op.Sigmoid(x)))


class FinalLayer(nn.Module):
    """``linear(norm_final(x) * (1 + adaLN_modulation(temb)))``, the modulation SiLU, Linear."""

    def __init__(self, config: ZImageConfig) -> None:
        super().__init__()
        dim = config.dim
        self.norm_final = WeightlessLayerNorm(dim, 1e-6)
        self.linear = Linear(dim, config.patch_size**2 * config.in_channels, bias=True)
        self.adaLN_modulation = nn.ModuleList(
            [nn.Module(), Linear(config.adaln_dim, dim, bias=True)]
        )

    def forward(self, op, x, temb):
        scale = self.adaLN_modulation[1](op, op.Mul(temb, op.Sigmoid(temb)))
        return self.linear(op, op.Mul(self.norm_final(op, x), op.Add(per_token(op, scale), 1.0)))


class PatchLayers(nn.Module):
    """diffusers' ``ModuleDict`` keyed ``"{patch}-{frame patch}"``: one entry, ``key``."""

    def __init__(self, key: str, layer: nn.Module) -> None:
        super().__init__()
        self.key = key
        setattr(self, key, layer)

    def forward(self, op, *args):
        return getattr(self, self.key)(op, *args)


def padded_length(op, length):
    """``length`` (int64) rounded up to a multiple of :data:`SEQ_MULTI_OF`."""
    multiple = op.Constant(value_int=SEQ_MULTI_OF)
    return op.Mul(op.Div(op.Add(length, SEQ_MULTI_OF - 1), multiple), multiple)


def with_pad_token(op, x, real, pad_token):
    """``x [b, n, dim]`` zero-padded to a multiple of 32 tokens; where ``real [b or 1, n']`` is
    false, ``pad_token [1, dim]``."""
    n = op.Shape(x, start=1, end=2)
    x = op.Pad(x, op.Concat(_ints(op, [0, 0, 0, 0]), op.Sub(padded_length(op, n), n), [0], axis=0))
    return op.Where(op.Unsqueeze(real, [2]), x, op.CastLike(pad_token, x))


def token_range(op, count):
    """int64 ``[count]``: ``0 .. count - 1`` (``count`` a 1-element shape)."""
    return op.Range(op.Constant(value_int=0), op.Squeeze(count), op.Constant(value_int=1))


class ZImageTransformer2DModel(Model):
    """diffusers' ``ZImageTransformer2DModel`` (Z-Image, Z-Image-Turbo), text to image."""

    config_class = ZImageConfig
    task = "denoising"

    def __init__(self, config: ZImageConfig) -> None:
        super().__init__()
        self.config = config
        c, dim = config, config.dim
        self.rope_embedder = AxesRotary(c.axes_dims, c.rope_theta)
        self.t_embedder = TimestepEmbedder(c.adaln_dim)
        self.cap_embedder = nn.ModuleList(
            [RMSNorm(c.cap_feat_dim, c.norm_eps), Linear(c.cap_feat_dim, dim, bias=True)]
        )
        x_embedder = Linear(c.patch_size**2 * c.in_channels, dim, bias=True)
        self.all_x_embedder = PatchLayers(c.patch_key, x_embedder)
        self.all_final_layer = PatchLayers(c.patch_key, FinalLayer(c))
        self.x_pad_token = nn.Parameter([1, dim])
        self.cap_pad_token = nn.Parameter([1, dim])
        refiners = range(c.n_refiner_layers)
        self.noise_refiner = nn.ModuleList([ZImageTransformerBlock(c, True) for _ in refiners])
        self.context_refiner = nn.ModuleList([ZImageTransformerBlock(c, False) for _ in refiners])
        self.layers = nn.ModuleList([ZImageTransformerBlock(c, True) for _ in range(c.n_layers)])

    def rotary(self, op, positions, like):
        """``(cos, sin)`` ``[batch, tokens, head_dim/2]`` of float ``positions [batch, tokens, 3]``."""
        cos, sin = self.rope_embedder(op, positions)
        return op.CastLike(cos, like), op.CastLike(sin, like)

    def caption_tokens(self, op, states, mask):
        """``(caption [b, S', dim], keys bool [b, S'], rotary, L' [b, 1])``.

        Row ``i``'s first ``L_i = sum(mask[i])`` tokens are its caption, then pad tokens up
        to ``L'_i`` (a multiple of 32), attended to; tokens past ``L'_i`` (up to ``S'``, the
        sequence rounded up) are batch padding, masked as keys. Token ``j`` sits at
        ``(1 + j, 0, 0)``."""
        caption = self.cap_embedder[1](op, self.cap_embedder[0](op, states))
        lengths = op.ReduceSum(mask, _ints(op, [1]), keepdims=1)  # [b, 1]
        tokens = token_range(op, padded_length(op, op.Shape(caption, start=1, end=2)))
        caption = with_pad_token(
            op, caption, op.Less(op.Unsqueeze(tokens, [0]), lengths), self.cap_pad_token
        )
        padded = padded_length(op, lengths)
        keys = op.Less(op.Unsqueeze(tokens, [0]), padded)  # [b, S']
        ids = op.Pad(op.Unsqueeze(op.Add(tokens, 1), [1]), _ints(op, [0, 0, 0, 2]))  # [S', 3]
        batch = op.Concat(op.Shape(caption, end=1), _ints(op, [1, 1]), axis=0)
        ids = op.Expand(op.Unsqueeze(op.Cast(ids, to=ir.DataType.FLOAT), [0]), batch)
        return caption, keys, self.rotary(op, ids, caption), padded

    def image_tokens(self, op, latents, h, w, caption_lengths):
        """``(x [b, N', dim], rotary)``: the ``N = h * w`` patches at
        ``(L'_i + 1, row, column)``, then pad tokens up to a multiple of 32 at ``(0, 0, 0)``."""
        c = self.config
        x = self.all_x_embedder(op, patchify(op, latents, h, w, c.patch_size, c.in_channels))
        patches = op.Mul(h, w)
        real = op.Less(token_range(op, padded_length(op, patches)), patches)
        x = with_pad_token(op, x, op.Unsqueeze(real, [0]), self.x_pad_token)
        pads = op.Sub(op.Shape(real), patches)
        grid = op.Pad(image_positions(op, h, w), op.Concat([0, 0], pads, [0], axis=0))  # [N', 3]
        start = op.Cast(op.Add(caption_lengths, 1), to=ir.DataType.FLOAT)  # [b, 1]
        first_axis = op.Mul(  # [1, N', 3]: (1, 0, 0) on the real patches
            op.Unsqueeze(op.Cast(real, to=ir.DataType.FLOAT), [0, 2]),
            op.Constant(value=ir.tensor(np.array([[[1, 0, 0]]], np.float32))),
        )
        ids = op.Add(op.Unsqueeze(grid, [0]), op.Mul(op.Unsqueeze(start, [2]), first_axis))
        return x, self.rotary(op, ids, x)

    def forward(self, op, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask):
        c, p = self.config, self.config.patch_size
        h, w = (op.Div(op.Shape(hidden_states, start=i, end=i + 1), _ints(op, [p])) for i in (2, 3))
        t = op.Mul(timestep, op.CastLike(op.Constant(value_float=c.t_scale), timestep))
        temb = self.t_embedder(op, t, hidden_states)
        caption, caption_keys, caption_rotary, lengths = self.caption_tokens(
            op, encoder_hidden_states, encoder_attention_mask
        )
        x, image_rotary = self.image_tokens(op, hidden_states, h, w, lengths)

        for block in self.noise_refiner:
            x = block(op, x, image_rotary, None, temb)
        caption_mask = caption_bias(op, caption_keys, caption)
        for block in self.context_refiner:
            caption = block(op, caption, caption_rotary, caption_mask)

        joint = op.Concat(x, caption, axis=1)  # [image, caption], as diffusers orders them
        rotary = tuple(
            op.Concat(a, b, axis=1) for a, b in zip(image_rotary, caption_rotary, strict=True)
        )
        everything = op.Constant(value=ir.tensor(np.ones((1, 1), np.bool_)))
        image_keys = op.Expand(everything, op.Shape(x, end=2))  # its pad tokens are keys too
        joint_mask = caption_bias(op, op.Concat(image_keys, caption_keys, axis=1), joint)
        for block in self.layers:
            joint = block(op, joint, rotary, joint_mask, temb)
        x = op.Slice(joint, _ints(op, [0]), op.Mul(h, w), _ints(op, [1]))
        x = self.all_final_layer(op, x, temb)
        return unpatchify(op, x, h, w, p, c.in_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "timestep": (None, ["batch"]),
            "encoder_hidden_states": (None, ["batch", "sequence", c.cap_feat_dim]),
            "encoder_attention_mask": (ir.DataType.INT64, ["batch", "sequence"]),
        }
        outputs = {"out_hidden_states": ["batch", c.in_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"ZImageTransformer2DModel": ZImageTransformer2DModel}
