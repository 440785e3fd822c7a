"""WanTransformer3DModel: the video denoiser of Wan 2.1 and 2.2 (T2V, I2V, FLF2V, TI2V).

Wan 2.2's two experts are two components (``transformer``, ``transformer_2``) of this class.

The latent video ``[b, C, F, H, W]`` is cut into ``p_t x p_h x p_w`` patches by a
strided 3-D conv (``patch_embedding``). The timestep's sinusoid goes through
``condition_embedder.time_embedder`` to ``temb`` and through ``time_proj`` to the
six modulation vectors of every block, each block adding its own
``scale_shift_table``; the UMT5 states go through ``text_embedder``. A block runs
modulated self-attention with RMS-normed queries and keys (one norm across all
heads) and 3-D rotary positions, cross-attention to the text (and, for I2V, to the
projected CLIP image states through ``add_k_proj``/``add_v_proj``), and a modulated
feed-forward. ``norm_out`` modulated by ``scale_shift_table + temb``, ``proj_out``
and the patches folded back end it.

The rotary tables are computed in the graph from the input's patch grid: each axis
(frames, rows, columns) rotates its own slice of the head, at positions ``0..n-1``.
The per-axis cos/sin tables (``rope_max_seq_len`` positions) are built at export in
float64 and stored in float32, the values of diffusers' ``WanRotaryPosEmbed``
buffers, so the caller passes no table (a runner needs none of diffusers' code).

Graph (:class:`mobius.tasks.DenoisingTask`): ``hidden_states`` [batch, channels,
frames, latent_height, latent_width], ``encoder_hidden_states`` [batch, sequence,
text_dim], ``timestep`` [batch] (I2V adds ``encoder_hidden_states_image`` [batch,
image_tokens, image_dim], the CLIP vision states) -> ``out_hidden_states``. A
first-last-frame model (``pos_embed_seq_len``) takes the first and the last frame's
states as the pipeline passes them, ``[image_batch = 2 * batch, image_tokens,
image_dim]`` (first, last, first, last...), joins each pair and adds ``pos_embed``.
Wan 2.2 TI2V's per-token timesteps (the pipeline's ``expand_timesteps``: the
conditioning frame's tokens at 0) are built when the component's ``config.json``
says ``"expand_timesteps": true`` (not a diffusers field: the transformer's config
does not tell them apart; a pipeline build sets it from ``model_index.json``):
``timestep`` is then [batch, video_tokens].

diffusers' I2V attention cuts its context at ``length - 512`` (the text is padded to
512 tokens by the Wan pipelines); the graph keeps the two inputs apart, which is the
same thing for the pipelines' 512-token text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv3d, LayerNorm, Linear, RMSNorm, check_constant_size
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import FeedForward
from mobius_diffusion.models._dit_blocks import QKNormAttention, TextProjection, layer_norm
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.tasks import GraphSpec


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def positive_int(owner: str, name: str, value: Any) -> int:
    """``value`` when it is an int >= 1 (a config read from a stranger's file), else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}: {name} must be a positive integer, not {value!r}")
    return value


def _positive_int(name: str, value: Any) -> int:
    return positive_int("Wan transformer", name, value)


@dataclass
class WanConfig:
    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_max_seq_len: int = 1024
    pos_embed_seq_len: int | None = None
    #: mobius' own field (see the module docstring): ``timestep`` per video token.
    expand_timesteps: bool = False

    @classmethod
    def from_hf(cls, config: Any) -> WanConfig:
        c = cls(**{k: getattr(config, k) for k in cls.__dataclass_fields__ if hasattr(config, k)})
        # qk_norm is read by nobody in diffusers: every WanAttention has its RMS norms.
        patch = c.patch_size
        if not isinstance(patch, (list, tuple)) or len(patch) != 3:
            raise ConfigError(f"Wan transformer: patch_size must be 3 integers, not {patch!r}")
        c.patch_size = tuple(_positive_int("patch_size", p) for p in patch)
        for name in (
            "num_attention_heads",
            "attention_head_dim",
            "in_channels",
            "text_dim",
            "freq_dim",
            "ffn_dim",
            "num_layers",
            "rope_max_seq_len",
        ):
            _positive_int(name, getattr(c, name))
        c.out_channels = _positive_int("out_channels", c.out_channels or c.in_channels)
        if c.attention_head_dim % 2:
            raise ConfigError("Wan transformer: attention_head_dim must be even (rotary pairs)")
        if (c.image_dim is None) != (c.added_kv_proj_dim is None):
            raise ConfigError(
                "Wan transformer: image_dim and added_kv_proj_dim go together (I2V) or not at all"
            )
        if c.image_dim is not None:
            _positive_int("image_dim", c.image_dim)
            if c.added_kv_proj_dim != c.inner_dim:
                raise ConfigError(
                    f"Wan transformer: added_kv_proj_dim {c.added_kv_proj_dim} must be the "
                    f"inner dim {c.inner_dim} (the image embedder's output)"
                )
        first_last = c.pos_embed_seq_len is not None
        if first_last and (
            _positive_int("pos_embed_seq_len", c.pos_embed_seq_len) % 2 or not c.image_dim
        ):
            raise ConfigError(
                "Wan transformer: pos_embed_seq_len (two images' tokens) must be even and "
                "needs image_dim"
            )
        if not isinstance(c.expand_timesteps, bool):
            raise ConfigError(
                f"Wan transformer: expand_timesteps must be a boolean: {c.expand_timesteps!r}"
            )
        if not isinstance(c.eps, (int, float)) or not 0 < c.eps < 1:
            raise ConfigError(f"Wan transformer: eps must be in (0, 1), not {c.eps!r}")
        return c

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class WanRotaryTables(nn.Module):
    """diffusers' ``WanRotaryPosEmbed``: the patch grid -> ``(cos, sin)`` ``[tokens, head_dim/2]``.

    The head is split in frames, rows and columns parts (rows and columns get
    ``2 * (head_dim // 6)`` channels each, frames the rest); adjacent channel pairs
    rotate together, so one angle per pair is stored.
    """

    def __init__(self, head_dim: int, max_positions: int, theta: float = 10000.0) -> None:
        super().__init__()
        side = 2 * (head_dim // 6)
        # float64 angles of every axis: max_positions x head_dim/2 entries at most
        check_constant_size((max_positions, head_dim // 2), 8, "rotary table", "rope_max_seq_len")
        positions = np.arange(max_positions, dtype=np.float64)
        self.pairs = head_dim // 2
        self.axes = []
        for dim in (head_dim - 2 * side, side, side):
            freqs = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
            angles = np.outer(positions, freqs)  # float64 like diffusers, stored in float32
            self.axes.append((np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)))

    def forward(self, op, grid):
        """``grid`` int64 [3] (frames, rows, columns in patches) -> ``(cos, sin)``."""
        sizes = [op.Slice(grid, _ints(op, [i]), _ints(op, [i + 1])) for i in range(3)]
        shape = op.Concat(*sizes, _ints(op, [1]), axis=0)
        tables = []
        for which in (0, 1):  # cos, then sin
            parts = []
            for axis, axis_tables in enumerate(self.axes):
                table = op.Constant(value=ir.tensor(axis_tables[which]))
                table = op.Slice(table, _ints(op, [0]), sizes[axis])  # [n, pairs of the axis]
                view = [1, 1, 1, axis_tables[which].shape[1]]
                view[axis] = -1
                parts.append(op.Expand(op.Reshape(table, _ints(op, view)), shape))
            tables.append(op.Reshape(op.Concat(*parts, axis=-1), _ints(op, [-1, self.pairs])))
        return tables[0], tables[1]


class WanAttention(QKNormAttention):
    """Self-attention with one RMS norm of queries and keys across all heads (``norm_q``/``norm_k``).

    Queries and keys are rotated after the norms (adjacent channel pairs).
    """

    def __init__(self, dim: int, heads: int, eps: float) -> None:
        super().__init__(dim, heads, dim // heads, qk_norm=False)
        self.norm_q = RMSNorm(dim, eps)
        self.norm_k = RMSNorm(dim, eps)

    def head_norm(self, op, norm, x):
        return norm(op, x)  # across heads: the whole projection at once

    def forward(self, op, hidden, rotary=None, bias=None):
        """``bias`` (optional, SkyReels-V2's block-causal mask): added to the scores."""
        return self.to_out[0](op, self.attend(op, *self.qkv(op, hidden, rotary), bias))


class WanCrossAttention(WanAttention):
    """The text's keys and values; with ``added_kv_proj_dim`` (I2V) the image's too, results added.

    The image side has its own ``add_k_proj``/``add_v_proj`` and key norm ``norm_added_k``;
    the queries are shared.
    """

    def __init__(self, dim: int, heads: int, eps: float, added_kv_proj_dim: int | None) -> None:
        super().__init__(dim, heads, eps)
        self.add_k_proj = self.add_v_proj = self.norm_added_k = None
        if added_kv_proj_dim is not None:
            self.add_k_proj = Linear(added_kv_proj_dim, dim, bias=True)
            self.add_v_proj = Linear(added_kv_proj_dim, dim, bias=True)
            self.norm_added_k = RMSNorm(dim, eps)

    def forward(self, op, hidden, context, image=None):
        q = self.norm_q(op, self.to_q(op, hidden))
        k = self.norm_k(op, self.to_k(op, context))
        out = self.attend(op, q, k, self.to_v(op, context))
        if image is not None:
            k_image = self.norm_added_k(op, self.add_k_proj(op, image))
            out = op.Add(out, self.attend(op, q, k_image, self.add_v_proj(op, image)))
        return self.to_out[0](op, out)


class WanTransformerBlock(nn.Module):
    """Modulated self-attention, cross-attention (``norm2`` when ``cross_attn_norm``), modulated FFN."""

    def __init__(self, c: WanConfig) -> None:
        super().__init__()
        dim = c.inner_dim
        self.norm1 = layer_norm(dim, c.eps, elementwise_affine=False)
        self.attn1 = WanAttention(dim, c.num_attention_heads, c.eps)
        self.attn2 = WanCrossAttention(dim, c.num_attention_heads, c.eps, c.added_kv_proj_dim)
        self.norm2 = LayerNorm(dim, c.eps) if c.cross_attn_norm else None
        self.ffn = FeedForward(dim, inner_dim=c.ffn_dim, activation_fn="gelu-approximate")
        self.norm3 = layer_norm(dim, c.eps, elementwise_affine=False)
        self.scale_shift_table = nn.Parameter([1, 6, dim])

    def forward(self, op, hidden, context, image, modulation, rotary, bias=None):
        """``modulation`` [batch, steps, 6, dim] (``time_proj``'s): one step for every token, or per token.

        ``bias`` (optional) is added to the self-attention's scores.
        """
        chunks = op.Split(
            op.Add(self.scale_shift_table, modulation), axis=2, num_outputs=6, _outputs=6
        )
        shift, scale, gate, c_shift, c_scale, c_gate = (
            op.Squeeze(chunk, _ints(op, [2])) for chunk in chunks
        )  # each [batch, steps, dim]
        normed = op.Add(op.Mul(self.norm1(op, hidden), op.Add(scale, 1.0)), shift)
        hidden = op.Add(hidden, op.Mul(self.attn1(op, normed, rotary, bias), gate))
        normed = hidden if self.norm2 is None else self.norm2(op, hidden)
        hidden = op.Add(hidden, self.attn2(op, normed, context, image))
        normed = op.Add(op.Mul(self.norm3(op, hidden), op.Add(c_scale, 1.0)), c_shift)
        return op.Add(hidden, op.Mul(self.ffn(op, normed), c_gate))


class WanImageEmbedding(nn.Module):
    """``norm1``, a GELU feed-forward (``ff``), ``norm2``: CLIP image states to the model width.

    With ``pos_embed_seq_len`` (first-last-frame), rows ``2i`` and ``2i + 1`` are joined
    into one sequence and ``pos_embed`` is added first.
    """

    def __init__(self, in_features: int, out_features: int, pos_embed_seq_len=None) -> None:
        super().__init__()
        self.norm1 = LayerNorm(in_features)  # diffusers' FP32LayerNorm: eps 1e-5, affine
        self.ff = FeedForward(in_features, out_features, mult=1, activation_fn="gelu")
        self.norm2 = LayerNorm(out_features)
        self.in_features = in_features
        self.pos_embed = None
        if pos_embed_seq_len is not None:
            self.pos_embed = nn.Parameter([1, pos_embed_seq_len, in_features])

    def forward(self, op, x):
        if self.pos_embed is not None:
            pair = op.Mul(op.Shape(x, start=1, end=2), _ints(op, [2]))
            x = op.Reshape(
                x, op.Concat(_ints(op, [-1]), pair, _ints(op, [self.in_features]), axis=0)
            )
            x = op.Add(x, self.pos_embed)
        return self.norm2(op, self.ff(op, self.norm1(op, x)))


class WanTimeTextImageEmbedding(nn.Module):
    """``temb``, the blocks' modulation ``time_proj(silu(temb))``, the text (and image) states."""

    def __init__(self, c: WanConfig) -> None:
        super().__init__()
        dim = c.inner_dim
        self.timesteps_proj = Timesteps(c.freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedder = TimestepEmbedding(c.freq_dim, dim)
        self.time_proj = Linear(dim, 6 * dim, bias=True)
        self.text_embedder = TextProjection(c.text_dim, dim, act_fn="gelu_tanh")
        self.image_embedder = None
        if c.image_dim:
            self.image_embedder = WanImageEmbedding(c.image_dim, dim, c.pos_embed_seq_len)

    def forward(self, op, timestep, text, image=None):
        """``timestep`` [batch, steps] -> ``temb`` [batch, steps, dim], modulation [.., 6 * dim]."""
        sinusoid = self.timesteps_proj(op, op.Reshape(timestep, _ints(op, [-1])), text)
        sinusoid = op.Reshape(sinusoid, op.Concat(op.Shape(timestep), _ints(op, [-1]), axis=0))
        temb = self.time_embedder(op, sinusoid)
        modulation = self.time_proj(op, op.Mul(temb, op.Sigmoid(temb)))
        image = None if image is None else self.image_embedder(op, image)
        return temb, modulation, self.text_embedder(op, text), image


class WanTransformer3DModel(Model):
    """diffusers' ``WanTransformer3DModel``; see the module docstring for the graph."""

    config_class = WanConfig
    task = "denoising"
    #: diffusers drops these on load (some I2V checkpoints carry them; nothing reads them).
    ignored = ("blocks.*.attn2.norm_added_q.*",)

    def __init__(self, config: WanConfig) -> None:
        super().__init__()
        c = self.config = config
        dim = c.inner_dim
        self.rope = WanRotaryTables(c.attention_head_dim, c.rope_max_seq_len)
        self.patch_embedding = Conv3d(c.in_channels, dim, c.patch_size, stride=c.patch_size)
        self.condition_embedder = WanTimeTextImageEmbedding(c)
        self.blocks = nn.ModuleList([WanTransformerBlock(c) for _ in range(c.num_layers)])
        self.norm_out = layer_norm(dim, c.eps, elementwise_affine=False)
        self.proj_out = Linear(dim, c.out_channels * int(np.prod(c.patch_size)), bias=True)
        self.scale_shift_table = nn.Parameter([1, 2, dim])

    def patches(self, op, video):
        """``[b, C, F, H, W]`` -> ``(tokens [b, f*h*w, dim], grid int64 [3])``."""
        x = self.patch_embedding(op, video)  # [b, dim, f, h, w]
        grid = op.Shape(x, start=2)
        tokens = op.Transpose(op.Reshape(x, _ints(op, [0, 0, -1])), perm=[0, 2, 1])
        return tokens, grid

    def unpatchify(self, op, x, grid):
        """``[b, f*h*w, p_t*p_h*p_w*C]`` -> ``[b, C, f*p_t, h*p_h, w*p_w]``."""
        c = self.config
        x = op.Reshape(
            x, op.Concat(_ints(op, [0]), grid, _ints(op, [*c.patch_size, c.out_channels]), axis=0)
        )
        x = op.Transpose(x, perm=[0, 7, 1, 4, 2, 5, 3, 6])  # [b, C, f, p_t, h, p_h, w, p_w]
        sizes = op.Mul(grid, _ints(op, c.patch_size))
        return op.Reshape(x, op.Concat(_ints(op, [0, c.out_channels]), sizes, axis=0))

    def rotary(self, op, tokens, grid):
        """``(cos, sin)`` [batch, tokens, head_dim/2] of the patch ``grid``, in ``tokens``' dtype."""
        cos, sin = self.rope(op, grid)
        rows = op.Concat(op.Shape(tokens, start=0, end=1), op.Shape(cos), axis=0)
        return op.Expand(op.CastLike(cos, tokens), rows), op.Expand(op.CastLike(sin, tokens), rows)

    def conditions(self, op, timestep, text, image, grid):
        """``temb`` [batch, steps, dim], the blocks' modulation [batch, steps, 6, dim], the text
        (and image) states; ``steps`` is 1, or every video token (``expand_timesteps``)."""
        if not self.config.expand_timesteps:  # one step for all tokens: broadcasts over them
            timestep = op.Unsqueeze(timestep, _ints(op, [1]))
        temb, modulation, context, image = self.condition_embedder(op, timestep, text, image)
        modulation = op.Reshape(modulation, _ints(op, [0, 0, 6, self.config.inner_dim]))
        return temb, modulation, context, image

    def output(self, op, hidden, temb, grid):
        """``norm_out`` modulated by ``scale_shift_table + temb``, ``proj_out``, the patches folded back."""
        final = op.Add(self.scale_shift_table, op.Unsqueeze(temb, _ints(op, [2])))
        shift, scale = (
            op.Squeeze(chunk, _ints(op, [2]))
            for chunk in op.Split(final, axis=2, num_outputs=2, _outputs=2)
        )  # each [batch, steps, dim]
        hidden = op.Add(op.Mul(self.norm_out(op, hidden), op.Add(scale, 1.0)), shift)
        return self.unpatchify(op, self.proj_out(op, hidden), grid)

    def forward(
        self, op, hidden_states, encoder_hidden_states, timestep, encoder_hidden_states_image=None
    ):
        hidden, grid = self.patches(op, hidden_states)
        rotary = self.rotary(op, hidden, grid)
        temb, modulation, context, image = self.conditions(
            op, timestep, encoder_hidden_states, encoder_hidden_states_image, grid
        )
        for block in self.blocks:
            hidden = block(op, hidden, context, image, modulation, rotary)
        return self.output(op, hidden, temb, grid)

    def graph_inputs(self) -> dict:
        """The graph's inputs (names of :meth:`forward`'s arguments): ``(dtype, shape)``."""
        c = self.config
        video = ["batch", c.in_channels, "frames", "latent_height", "latent_width"]
        inputs = {
            "hidden_states": (None, video),
            "encoder_hidden_states": (None, ["batch", "sequence", c.text_dim]),
            "timestep": (None, ["batch", "video_tokens"] if c.expand_timesteps else ["batch"]),
        }
        if c.image_dim:
            rows = "image_batch" if c.pos_embed_seq_len else "batch"  # first-last: two per row
            inputs["encoder_hidden_states_image"] = (None, [rows, "image_tokens", c.image_dim])
        return inputs

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config

        def forward(op, **inputs):
            return {"out_hidden_states": self(op, **inputs)}

        video = ["batch", c.out_channels, "frames", "latent_height", "latent_width"]
        outputs = {"out_hidden_states": video}
        return {"model": GraphSpec(self.graph_inputs(), outputs, forward)}


MODEL_TYPES = {"WanTransformer3DModel": WanTransformer3DModel}
