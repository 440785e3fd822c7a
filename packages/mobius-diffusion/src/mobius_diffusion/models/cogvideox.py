"""CogVideoXTransformer3DModel: the video denoiser of CogVideoX 1.0 and 1.5.

Text embeddings (``patch_embed.text_proj``) and video patches (``patch_embed.proj``:
a per-frame p x p conv, or for 1.5 a linear over ``p_t x p x p`` patches) form one
sequence, text first. 1.0 without RoPE adds a 3-D sin-cos table to the video
tokens, computed here for the input's size as diffusers does; checkpoints with
``use_learned_positional_embeddings`` carry a table (text part included) that
diffusers uses while the frame count is ``sample_frames``' and falls back to the
sin-cos table otherwise, and so does the graph. Each ``CogVideoXBlock`` modulates
both streams with their own shift/scale/gate from one ``linear(silu(temb))``
(``CogVideoXLayerNormZero``), attends jointly with per-head LayerNormed queries and
keys, and runs one feed-forward over both. ``norm_final``, ``norm_out`` (shift then
scale) and ``proj_out`` end it, and the patches are folded back.

Graph (:class:`mobius.tasks.DenoisingTask`): ``hidden_states`` [batch, frames,
channels, latent_height, latent_width], ``encoder_hidden_states`` [batch, sequence,
text_embed_dim], ``timestep`` [batch] (and ``ofs`` [batch] with ``ofs_embed_dim``)
-> ``out_hidden_states``. With RoPE the pipeline's ``image_rotary_emb`` tables are
inputs, as the pipeline computes them outside the model:
``image_rotary_cos`` / ``image_rotary_sin`` [video_tokens, attention_head_dim]
(``get_3d_rotary_pos_embed``, pairs of adjacent channels rotated together).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._dit_blocks import WeightlessLayerNorm, modulate, per_token, sincos_1d
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.tasks import GraphSpec


def _ints(op, values):
    return op.Constant(value_ints=list(values))


@dataclass
class CogVideoXConfig:
    num_attention_heads: int = 30
    attention_head_dim: int = 64
    in_channels: int = 16
    out_channels: int = 16
    flip_sin_to_cos: bool = True
    freq_shift: int = 0
    time_embed_dim: int = 512
    ofs_embed_dim: int | None = None
    text_embed_dim: int = 4096
    num_layers: int = 30
    attention_bias: bool = True
    sample_width: int = 90
    sample_height: int = 60
    sample_frames: int = 49
    patch_size: int = 2
    patch_size_t: int | None = None
    temporal_compression_ratio: int = 4
    max_text_seq_length: int = 226
    activation_fn: str = "gelu-approximate"
    timestep_activation_fn: str = "silu"
    norm_elementwise_affine: bool = True
    norm_eps: float = 1e-5
    spatial_interpolation_scale: float = 1.875
    temporal_interpolation_scale: float = 1.0
    use_rotary_positional_embeddings: bool = False
    use_learned_positional_embeddings: bool = False
    patch_bias: bool = True

    @classmethod
    def from_hf(cls, config: Any) -> CogVideoXConfig:
        kwargs = {k: getattr(config, k) for k in cls.__dataclass_fields__ if hasattr(config, k)}
        c = cls(**kwargs)
        c.out_channels = c.out_channels or c.in_channels
        if c.use_learned_positional_embeddings and not c.use_rotary_positional_embeddings:
            raise ConfigError(
                "CogVideoX: learned positional embeddings without RoPE (diffusers refuses it)"
            )
        if c.patch_size_t is not None and not c.use_rotary_positional_embeddings:
            # diffusers sizes its position table by sample_frames, not by p_t patches: it cannot run
            raise ConfigError("CogVideoX: patch_size_t needs use_rotary_positional_embeddings")
        if c.ofs_embed_dim and c.ofs_embed_dim != c.time_embed_dim:
            raise ConfigError(
                "CogVideoX: ofs_embed_dim must equal time_embed_dim (the two are added)"
            )
        if c.timestep_activation_fn != "silu":
            raise ConfigError(
                f"CogVideoX timestep_activation_fn {c.timestep_activation_fn!r} is not built"
            )
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


def _layer_norm(dim: int, eps: float, affine: bool):
    return LayerNorm(dim, eps) if affine else WeightlessLayerNorm(dim, eps)


def rotate_pairs(op, x, cos, sin):
    """diffusers' ``apply_rotary_emb`` (``use_real_unbind_dim=-1``) on ``[b, s, heads, d]`` with ``[s, 1, d]`` tables."""
    pairs = op.Reshape(x, _ints(op, [0, 0, 0, -1, 2]))
    real, imag = op.Split(pairs, num_outputs=2, axis=-1, _outputs=2)
    rotated = op.Reshape(op.Concat(op.Neg(imag), real, axis=-1), op.Shape(x))
    return op.Add(op.Mul(x, cos), op.Mul(rotated, sin))


class CogVideoXAttention(Attention):
    """Joint self-attention over ``[text; video]`` with per-head LayerNorm on queries and keys (``norm_q``/``norm_k``)."""

    def __init__(self, dim: int, heads: int, dim_head: int, bias: bool) -> None:
        super().__init__(dim, heads, dim_head, bias=bias)
        self.norm_q = LayerNorm(dim_head, 1e-6)
        self.norm_k = LayerNorm(dim_head, 1e-6)

    def heads_of(self, op, norm, x, rotary):
        x = norm(
            op, op.Reshape(x, _ints(op, [0, 0, self.heads, self.dim_head]))
        )  # [b, s, heads, d]
        if rotary is not None:
            x = rotate_pairs(op, x, *rotary)
        return op.Reshape(x, _ints(op, [0, 0, -1]))

    def forward(self, op, hidden, rotary=None):
        q = self.heads_of(op, self.norm_q, self.to_q(op, hidden), rotary)
        k = self.heads_of(op, self.norm_k, self.to_k(op, hidden), rotary)
        return self.to_out[0](op, self.attend(op, q, k, self.to_v(op, hidden)))


class CogVideoXLayerNormZero(nn.Module):
    """``linear(silu(temb))`` -> shift, scale, gate for the video and for the text; one shared ``norm``."""

    def __init__(self, cond_dim: int, dim: int, affine: bool, eps: float) -> None:
        super().__init__()
        self.linear = Linear(cond_dim, 6 * dim, bias=True)
        self.norm = _layer_norm(dim, eps, affine)

    def forward(self, op, hidden, context, temb):
        emb = self.linear(op, op.Mul(temb, op.Sigmoid(temb)))
        shift, scale, gate, c_shift, c_scale, c_gate = op.Split(
            emb, axis=1, num_outputs=6, _outputs=6
        )
        hidden = modulate(op, self.norm(op, hidden), shift, scale)
        context = modulate(op, self.norm(op, context), c_shift, c_scale)
        return hidden, context, per_token(op, gate), per_token(op, c_gate)


class CogVideoXBlock(nn.Module):
    def __init__(self, c: CogVideoXConfig) -> None:
        super().__init__()
        dim = c.inner_dim
        self.norm1 = CogVideoXLayerNormZero(
            c.time_embed_dim, dim, c.norm_elementwise_affine, c.norm_eps
        )
        self.attn1 = CogVideoXAttention(
            dim, c.num_attention_heads, c.attention_head_dim, c.attention_bias
        )
        self.norm2 = CogVideoXLayerNormZero(
            c.time_embed_dim, dim, c.norm_elementwise_affine, c.norm_eps
        )
        self.ff = FeedForward(dim, activation_fn=c.activation_fn, bias=True)

    def forward(self, op, hidden, context, temb, text_len, rotary):
        """``hidden`` video tokens, ``context`` text tokens; ``rotary`` covers ``[text; video]``."""
        normed, c_normed, gate, c_gate = self.norm1(op, hidden, context, temb)
        out = self.attn1(op, op.Concat(c_normed, normed, axis=1), rotary)
        c_out, out = self._split(op, out, text_len)
        hidden, context = op.Add(hidden, op.Mul(gate, out)), op.Add(context, op.Mul(c_gate, c_out))
        normed, c_normed, gate, c_gate = self.norm2(op, hidden, context, temb)
        c_out, out = self._split(op, self.ff(op, op.Concat(c_normed, normed, axis=1)), text_len)
        return op.Add(hidden, op.Mul(gate, out)), op.Add(context, op.Mul(c_gate, c_out))

    @staticmethod
    def _split(op, x, text_len):
        video_len = op.Sub(op.Shape(x, start=1, end=2), text_len)
        return op.Split(x, op.Concat(text_len, video_len, axis=0), axis=1, _outputs=2)


class CogVideoXPatchEmbed(nn.Module):
    """``text_proj`` and ``proj`` (a p x p conv per frame; 1.5: a linear over p_t x p x p patches), plus positions."""

    def __init__(self, c: CogVideoXConfig) -> None:
        super().__init__()
        self.c = c
        p, dim = c.patch_size, c.inner_dim
        if c.patch_size_t is None:
            self.proj = Conv2d(c.in_channels, dim, p, stride=p, bias=c.patch_bias)
        else:
            self.proj = Linear(c.in_channels * p * p * c.patch_size_t, dim, bias=True)
        self.text_proj = Linear(c.text_embed_dim, dim, bias=True)
        self.pos_embedding = None
        if c.use_learned_positional_embeddings:
            frames = (c.sample_frames - 1) // c.temporal_compression_ratio + 1
            tokens = frames * (c.sample_height // p) * (c.sample_width // p)
            self.pos_embedding = nn.Parameter([1, c.max_text_seq_length + tokens, dim])

    def patches(self, op, video):
        """``[b, f, c, h, w]`` -> tokens ``[b, f' * h/p * w/p, dim]``."""
        c, p = self.c, self.c.patch_size
        if c.patch_size_t is None:
            frames = op.Reshape(video, op.Concat(_ints(op, [-1]), op.Shape(video, start=2), axis=0))
            x = self.proj(op, frames)  # [b*f, dim, h/p, w/p]
            x = op.Reshape(
                x, op.Concat(op.Shape(video, start=0, end=2), _ints(op, [c.inner_dim, -1]), axis=0)
            )
            return op.Reshape(op.Transpose(x, perm=[0, 1, 3, 2]), _ints(op, [0, -1, c.inner_dim]))
        pt, ch = c.patch_size_t, c.in_channels
        shape = op.Shape(video)
        grid = op.Div(
            op.Concat(op.Shape(video, start=1, end=2), op.Shape(video, start=3), axis=0),
            _ints(op, [pt, p, p]),
        )
        f, h, w = (op.Slice(grid, _ints(op, [i]), _ints(op, [i + 1])) for i in range(3))
        x = op.Reshape(
            video,
            op.Concat(
                op.Slice(shape, _ints(op, [0]), _ints(op, [1])),
                f,
                _ints(op, [pt, ch]),
                h,
                _ints(op, [p]),
                w,
                _ints(op, [p]),
                axis=0,
            ),
        )
        x = op.Transpose(x, perm=[0, 1, 4, 6, 3, 2, 5, 7])  # [b, f', h', w', c, pt, p, p]
        return self.proj(op, op.Reshape(x, _ints(op, [0, -1, ch * pt * p * p])))

    def sincos(self, op, video):
        """diffusers' ``get_3d_sincos_pos_embed`` for the input's size: ``[f * h/p * w/p, dim]``."""
        c, dim = self.c, self.c.inner_dim
        sizes = op.Div(op.Shape(video, start=3, end=5), _ints(op, [c.patch_size]))
        h, w = (op.Slice(sizes, _ints(op, [i]), _ints(op, [i + 1])) for i in range(2))
        f = op.Shape(video, start=1, end=2)

        def axis(n, scale):
            steps = op.Range(
                op.Constant(value_float=0.0),
                op.Cast(op.Squeeze(n), to=ir.DataType.FLOAT),
                op.Constant(value_float=1.0),
            )
            return op.Div(steps, op.Constant(value_float=float(scale)))

        quarter = dim // 4
        cols = sincos_1d(op, axis(w, c.spatial_interpolation_scale), 3 * quarter // 2)  # [w, 3d/8]
        rows = sincos_1d(op, axis(h, c.spatial_interpolation_scale), 3 * quarter // 2)
        times = sincos_1d(op, axis(f, c.temporal_interpolation_scale), quarter)  # [f, d/4]
        shape = op.Concat(f, h, w, _ints(op, [1]), axis=0)
        table = op.Concat(
            op.Expand(op.Reshape(times, _ints(op, [-1, 1, 1, quarter])), shape),
            op.Expand(op.Reshape(cols, _ints(op, [1, 1, -1, 3 * quarter // 2])), shape),
            op.Expand(op.Reshape(rows, _ints(op, [1, -1, 1, 3 * quarter // 2])), shape),
            axis=-1,
        )  # [f, h, w, dim]
        return op.Reshape(table, _ints(op, [-1, dim]))

    def positions(self, op, video):
        """What diffusers adds to ``[text; video]``: ``(text part or None, video part)``."""
        c = self.c
        table = self.sincos(op, video)
        if self.pos_embedding is None:
            return None, table
        # the learned table holds for sample_frames (pixel frames) only; otherwise the sin-cos one
        frames = op.Shape(video, start=1, end=2)
        pixel_frames = op.Add(
            op.Mul(op.Sub(frames, _ints(op, [1])), _ints(op, [c.temporal_compression_ratio])),
            _ints(op, [1]),
        )
        learned = op.Equal(pixel_frames, _ints(op, [c.sample_frames]))
        stored = op.Squeeze(self.pos_embedding, _ints(op, [0]))
        text_len = c.max_text_seq_length
        text_part = op.Where(
            learned,
            op.Slice(stored, _ints(op, [0]), _ints(op, [text_len])),
            op.CastLike(0.0, stored),
        )
        video_part = op.Slice(stored, _ints(op, [text_len]), _ints(op, [2**62]))
        tokens = op.Shape(table, start=0, end=1)
        missing = op.Max(op.Sub(tokens, op.Shape(video_part, start=0, end=1)), _ints(op, [0]))
        video_part = op.Pad(
            video_part, op.Concat(_ints(op, [0, 0]), missing, _ints(op, [0]), axis=0)
        )
        video_part = op.Slice(video_part, _ints(op, [0]), tokens)  # fitted to the input's tokens
        return text_part, op.Where(learned, video_part, op.CastLike(table, video_part))

    def forward(self, op, text, video):
        """-> ``(text tokens, video tokens)``, positions added."""
        text_tokens, video_tokens = self.text_proj(op, text), self.patches(op, video)
        if self.c.use_rotary_positional_embeddings and self.pos_embedding is None:
            return text_tokens, video_tokens
        text_pos, video_pos = self.positions(op, video)
        if text_pos is not None:
            text_tokens = op.Add(text_tokens, text_pos)
        return text_tokens, op.Add(video_tokens, op.CastLike(video_pos, video_tokens))


class AdaLayerNorm(nn.Module):
    """diffusers' ``AdaLayerNorm`` with ``chunk_dim=1``: ``norm(x) * (1 + scale) + shift``, shift first."""

    def __init__(self, cond_dim: int, dim: int, affine: bool, eps: float) -> None:
        super().__init__()
        self.linear = Linear(cond_dim, 2 * dim, bias=True)
        self.norm = _layer_norm(dim, eps, affine)

    def forward(self, op, x, temb):
        shift, scale = op.Split(
            self.linear(op, op.Mul(temb, op.Sigmoid(temb))), axis=1, num_outputs=2, _outputs=2
        )
        return modulate(op, self.norm(op, x), shift, scale)


class CogVideoXTransformer3DModel(Model):
    """diffusers' ``CogVideoXTransformer3DModel``; see the module docstring for the graph."""

    config_class = CogVideoXConfig
    task = "denoising"

    def __init__(self, config: CogVideoXConfig) -> None:
        super().__init__()
        c = self.config = config
        dim = c.inner_dim
        self.patch_embed = CogVideoXPatchEmbed(c)
        self.time_proj = Timesteps(dim, c.flip_sin_to_cos, c.freq_shift)
        self.time_embedding = TimestepEmbedding(dim, c.time_embed_dim, c.timestep_activation_fn)
        if c.ofs_embed_dim:
            self.ofs_proj = Timesteps(c.ofs_embed_dim, c.flip_sin_to_cos, c.freq_shift)
            self.ofs_embedding = TimestepEmbedding(
                c.ofs_embed_dim, c.ofs_embed_dim, c.timestep_activation_fn
            )
        self.transformer_blocks = nn.ModuleList([CogVideoXBlock(c) for _ in range(c.num_layers)])
        self.norm_final = _layer_norm(dim, c.norm_eps, c.norm_elementwise_affine)
        self.norm_out = AdaLayerNorm(c.time_embed_dim, dim, c.norm_elementwise_affine, c.norm_eps)
        self.proj_out = Linear(
            dim, c.patch_size**2 * (c.patch_size_t or 1) * c.out_channels, bias=True
        )

    def rotary(self, op, text, cos, sin):
        """The pipeline's video tables, extended over the text (cos 1, sin 0: unrotated), as ``[s, 1, d]``."""
        text_len = op.Shape(text, start=1, end=2)
        head = _ints(op, [self.config.attention_head_dim])
        ones = op.CastLike(op.ConstantOfShape(op.Concat(text_len, head, axis=0)), cos)
        ones = op.Add(ones, op.CastLike(1.0, cos))
        zeros = op.CastLike(op.ConstantOfShape(op.Concat(text_len, head, axis=0)), sin)
        axis = _ints(op, [1])
        return op.Unsqueeze(op.Concat(ones, cos, axis=0), axis), op.Unsqueeze(
            op.Concat(zeros, sin, axis=0), axis
        )

    def unpatchify(self, op, x, video):
        c, p = self.config, self.config.patch_size
        pt = c.patch_size_t or 1
        shape = op.Shape(video)
        b = op.Slice(shape, _ints(op, [0]), _ints(op, [1]))
        grid = op.Div(
            op.Slice(shape, _ints(op, [1]), _ints(op, [5])), _ints(op, [pt, 1, p, p])
        )  # [f', c, h', w']
        f, h, w = (op.Slice(grid, _ints(op, [i]), _ints(op, [i + 1])) for i in (0, 2, 3))
        x = op.Reshape(x, op.Concat(b, f, h, w, _ints(op, [c.out_channels, pt, p, p]), axis=0))
        x = op.Transpose(x, perm=[0, 1, 5, 4, 2, 6, 3, 7])  # [b, f', pt, c, h', p, w', p]
        out = op.Concat(
            b,
            op.Mul(f, _ints(op, [pt])),
            _ints(op, [c.out_channels]),
            op.Mul(h, _ints(op, [p])),
            op.Mul(w, _ints(op, [p])),
            axis=0,
        )
        return op.Reshape(x, out)

    def forward(self, op, hidden_states, encoder_hidden_states, timestep, ofs=None, rotary=None):
        emb = self.time_embedding(op, self.time_proj(op, timestep, hidden_states))
        if ofs is not None:
            emb = op.Add(emb, self.ofs_embedding(op, self.ofs_proj(op, ofs, hidden_states)))
        context, hidden = self.patch_embed(op, encoder_hidden_states, hidden_states)
        text_len = op.Shape(context, start=1, end=2)
        if rotary is not None:
            rotary = self.rotary(op, context, *rotary)
        for block in self.transformer_blocks:
            hidden, context = block(op, hidden, context, emb, text_len, rotary)
        hidden = self.norm_out(op, self.norm_final(op, hidden), emb)
        return self.unpatchify(op, self.proj_out(op, hidden), hidden_states)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        inputs = {
            "hidden_states": (
                None,
                ["batch", "frames", c.in_channels, "latent_height", "latent_width"],
            ),
            "encoder_hidden_states": (None, ["batch", "sequence", c.text_embed_dim]),
            "timestep": (None, ["batch"]),
        }
        if c.ofs_embed_dim:
            inputs["ofs"] = (None, ["batch"])
        if c.use_rotary_positional_embeddings:
            for name in ("image_rotary_cos", "image_rotary_sin"):
                inputs[name] = (None, ["video_tokens", c.attention_head_dim])

        def forward(
            op,
            hidden_states,
            encoder_hidden_states,
            timestep,
            ofs=None,
            image_rotary_cos=None,
            image_rotary_sin=None,
        ):
            rotary = None if image_rotary_cos is None else (image_rotary_cos, image_rotary_sin)
            out = self.forward(op, hidden_states, encoder_hidden_states, timestep, ofs, rotary)
            return {"out_hidden_states": out}

        outputs = {
            "out_hidden_states": [
                "batch",
                "frames",
                c.out_channels,
                "latent_height",
                "latent_width",
            ]
        }
        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"CogVideoXTransformer3DModel": CogVideoXTransformer3DModel}
