"""HiDream-I1's transformer: double- and single-stream blocks with a mixture-of-experts feed-forward.

The latent is cut into ``patch_size`` patches (rows, columns, then channels) and
projected. The conditioning ``temb`` is the timestep's embedding plus the pooled
text's (two CLIP ``text_embeds`` side by side). The text is T5's states and one
Llama layer's states per block (``llama_layers[i]`` for block ``i``, double blocks
first), each projected by its own ``caption_projection``: every block reads the
running text ``[T5, last listed Llama layer]`` followed by its own Llama layer,
whose updated states it drops. Double blocks keep image and text apart (``_i`` /
``_t`` weights) but attend jointly; single blocks run ``[image, text]`` as one.
The image feed-forward is a shared SwiGLU expert plus the top-k of the routed
ones (:mod:`~mobius_diffusion.models._hidream_blocks`).

Positions: image patch ``(r, c)`` sits at ``(0, r, c)`` over the three rotary axes,
every text token at ``(0, 0, 0)`` (no rotation). As diffusers, a square patch grid
is ``h * w`` tokens; a non-square one is zero-padded to ``max_seq`` tokens
(``max_resolution`` over the patch area) at position zero, with their keys zeroed.
A non-square grid of more than ``max_seq`` patches, which diffusers cannot run, is
left unpadded here.

Module tree and names follow diffusers' ``HiDreamImageTransformer2DModel``.
Graph: :class:`mobius.tasks.DenoisingTask`, ``hidden_states`` [batch, in_channels,
latent_height, latent_width], ``timestep`` [batch] (the scheduler's, 1000 to 0),
``encoder_hidden_states_t5`` [batch, sequence, caption_channels[0]],
``encoder_hidden_states_llama3`` [llama_layers, batch, llama_sequence,
caption_channels[1]] (transformers' ``hidden_states[1:]`` of Llama, stacked),
``pooled_embeds`` [batch, text_emb_dim] -> ``out_hidden_states`` [batch,
out_channels, latent_height, latent_width], not negated (the pipeline negates it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._checks import config_int, config_ints
from mobius_diffusion.models._dit_blocks import (
    AxesRotary,
    WeightlessLayerNorm,
    _ints,
    modulate,
    unpatchify,
)
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._hidream_blocks import (
    HiDreamBlock,
    HiDreamImageSingleTransformerBlock,
    HiDreamImageTransformerBlock,
    modulation,
)
from mobius_diffusion.models.lumina2 import image_positions, patchify
from mobius_diffusion.tasks import GraphSpec


@dataclass
class HiDreamImageConfig:
    patch_size: int = 2
    in_channels: int = 64
    out_channels: int = 64
    num_layers: int = 16
    num_single_layers: int = 32
    attention_head_dim: int = 128
    num_attention_heads: int = 20
    caption_channels: tuple[int, ...] = (4096, 4096)
    text_emb_dim: int = 2048
    num_routed_experts: int = 4
    num_activated_experts: int = 2
    axes_dims_rope: tuple[int, ...] = (64, 32, 32)
    max_resolution: tuple[int, ...] = (128, 128)
    llama_layers: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, config: Any) -> HiDreamImageConfig:
        # force_inference_output changes only diffusers' training path; inference ignores it.
        name = config.model_type
        double = config_int(config, "num_layers", 16, low=0)
        single = config_int(config, "num_single_layers", 32, low=0)
        if not double + single:
            raise ConfigError(f"{name} has no blocks (num_layers and num_single_layers are 0)")
        head_dim = config_int(config, "attention_head_dim", 128)
        axes = config_ints(config, "axes_dims_rope", (32, 32), count=3)
        if any(d % 2 for d in axes) or sum(axes) not in (head_dim, head_dim // 2):
            raise ConfigError(
                f"{name} axes_dims_rope {list(axes)} must be even and sum to attention_head_dim "
                f"{head_dim} or its half"
            )
        experts = config_int(config, "num_routed_experts", 4, low=0)
        top_k = config_int(config, "num_activated_experts", 2)
        if experts and top_k > experts:
            raise ConfigError(
                f"{name} num_activated_experts {top_k} is more than num_routed_experts {experts}"
            )
        in_channels = config_int(config, "in_channels", 64)
        out_channels = in_channels  # diffusers' ``out_channels or in_channels``
        if getattr(config, "out_channels", None):
            out_channels = config_int(config, "out_channels")
        return cls(
            patch_size=config_int(config, "patch_size", None),  # diffusers has no usable default
            in_channels=in_channels,
            out_channels=out_channels,
            num_layers=double,
            num_single_layers=single,
            attention_head_dim=head_dim,
            num_attention_heads=config_int(config, "num_attention_heads", 20),
            caption_channels=config_ints(config, "caption_channels", None, count=2),
            text_emb_dim=config_int(config, "text_emb_dim", 2048),
            num_routed_experts=experts,
            num_activated_experts=top_k,
            axes_dims_rope=axes,
            max_resolution=config_ints(config, "max_resolution", (128, 128), count=2),
            # one Llama layer per block, in block order
            llama_layers=config_ints(config, "llama_layers", None, count=double + single, low=0),
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def max_seq(self) -> int:
        """The tokens a non-square patch grid is padded to."""
        rows, columns = self.max_resolution
        return rows * columns // (self.patch_size * self.patch_size)


class HiDreamImageTimestepEmbed(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.timestep_embedder = TimestepEmbedding(256, dim)

    def forward(self, op, timesteps, like):
        return self.timestep_embedder(op, self.time_proj(op, timesteps, like))


class HiDreamImagePooledEmbed(nn.Module):
    def __init__(self, text_emb_dim: int, dim: int) -> None:
        super().__init__()
        self.pooled_embedder = TimestepEmbedding(text_emb_dim, dim)

    def forward(self, op, pooled):
        return self.pooled_embedder(op, pooled)


class HiDreamImagePatchEmbed(nn.Module):
    def __init__(self, features: int, dim: int) -> None:
        super().__init__()
        self.proj = Linear(features, dim, bias=True)

    def forward(self, op, patches):
        return self.proj(op, patches)


class TextProjection(nn.Module):
    def __init__(self, in_features: int, dim: int) -> None:
        super().__init__()
        self.linear = Linear(in_features, dim)

    def forward(self, op, caption):
        return self.linear(op, caption)


class HiDreamImageOutEmbed(nn.Module):
    """``linear(norm_final(x) * (1 + scale) + shift)``, ``(shift, scale)`` from ``adaLN_modulation``."""

    def __init__(self, dim: int, out_features: int) -> None:
        super().__init__()
        self.norm_final = WeightlessLayerNorm(dim, 1e-6)
        self.linear = Linear(dim, out_features, bias=True)
        self.adaLN_modulation = nn.ModuleList([nn.Module(), Linear(dim, 2 * dim, bias=True)])

    def forward(self, op, x, temb):
        shift, scale = modulation(op, self.adaLN_modulation, temb, 2)
        return self.linear(op, modulate(op, self.norm_final(op, x), shift, scale))


class HiDreamImageTransformer2DModel(Model):
    """diffusers' ``HiDreamImageTransformer2DModel`` (HiDream-I1 Full, Dev and Fast)."""

    config_class = HiDreamImageConfig
    task = "denoising"

    def __init__(self, config: HiDreamImageConfig) -> None:
        super().__init__()
        self.config = c = config
        dim, p = c.inner_dim, c.patch_size
        block = (
            dim,
            c.num_attention_heads,
            c.attention_head_dim,
            sum(c.axes_dims_rope),  # the rotated channels of each head
            c.num_routed_experts,
            c.num_activated_experts,
        )
        self.t_embedder = HiDreamImageTimestepEmbed(dim)
        self.p_embedder = HiDreamImagePooledEmbed(c.text_emb_dim, dim)
        self.x_embedder = HiDreamImagePatchEmbed(p * p * c.in_channels, dim)
        self.pe_embedder = AxesRotary(c.axes_dims_rope)
        self.double_stream_blocks = nn.ModuleList(
            [HiDreamBlock(HiDreamImageTransformerBlock(*block)) for _ in range(c.num_layers)]
        )
        self.single_stream_blocks = nn.ModuleList(
            [
                HiDreamBlock(HiDreamImageSingleTransformerBlock(*block))
                for _ in range(c.num_single_layers)
            ]
        )
        self.final_layer = HiDreamImageOutEmbed(dim, p * p * c.out_channels)
        t5, llama = c.caption_channels
        self.caption_projection = nn.ModuleList(
            [TextProjection(llama, dim) for _ in c.llama_layers] + [TextProjection(t5, dim)]
        )

    def captions(self, op, t5, llama3) -> tuple:
        """``(T5's projected states, [each block's projected Llama layer])``."""
        layers = [
            self.caption_projection[i](op, op.Gather(llama3, op.Constant(value_int=k), axis=0))
            for i, k in enumerate(self.config.llama_layers)
        ]
        return self.caption_projection[-1](op, t5), layers

    def positions(self, op, h, w, tokens, text, like):
        """``(rotary (cos, sin) [batch, image + text tokens, rotary/2], keep [1, tokens, 1])``
        of ``tokens`` image tokens (``h * w`` real, then padding) and ``text`` text tokens."""
        real = op.Mul(h, w)
        ids = op.Pad(
            image_positions(op, h, w),
            op.Concat(_ints(op, [0, 0]), op.Sub(tokens, real), _ints(op, [0]), axis=0),
        )
        cos, sin = self.pe_embedder(op, ids)  # [tokens, rotary/2]
        after = op.Concat(_ints(op, [0, 0]), text, _ints(op, [0]), axis=0)
        cos = op.Pad(cos, after, op.Constant(value_float=1.0))  # text: no rotation
        sin = op.Pad(sin, after, op.Constant(value_float=0.0))
        rows = op.Concat(op.Shape(like, start=0, end=1), op.Shape(cos), axis=0)
        rotary = tuple(op.Expand(op.CastLike(t, like), rows) for t in (cos, sin))
        index = op.Range(
            op.Constant(value_int=0), op.Squeeze(op.Add(tokens, text)), op.Constant(value_int=1)
        )
        padding = op.And(op.GreaterOrEqual(index, real), op.Less(index, tokens))
        keep = op.CastLike(op.Not(padding), like)  # all ones on a square grid: an exact no-op
        return rotary, op.Reshape(keep, _ints(op, [1, -1, 1]))

    def forward(
        self,
        op,
        hidden_states,
        timestep,
        encoder_hidden_states_t5,
        encoder_hidden_states_llama3,
        pooled_embeds,
    ):
        c, p = self.config, self.config.patch_size
        h, w = (op.Div(op.Shape(hidden_states, start=i, end=i + 1), _ints(op, [p])) for i in (2, 3))
        real = op.Mul(h, w)
        # diffusers pads a non-square grid to max_seq tokens (never below its own count here)
        tokens = op.Where(op.Equal(h, w), real, op.Max(real, _ints(op, [c.max_seq])))
        patches = patchify(op, hidden_states, h, w, p, c.in_channels)  # [b, h*w, p*p*c]
        pad = op.Concat(_ints(op, [0, 0, 0, 0]), op.Sub(tokens, real), _ints(op, [0]), axis=0)
        hidden = self.x_embedder(op, op.Pad(patches, pad))  # [b, tokens, dim]
        temb = op.Add(self.t_embedder(op, timestep, hidden), self.p_embedder(op, pooled_embeds))
        t5, llama = self.captions(op, encoder_hidden_states_t5, encoder_hidden_states_llama3)
        context = op.Concat(t5, llama[-1], axis=1)  # the running text, [T5, last Llama layer]
        context_len = op.Shape(context, start=1, end=2)
        text = op.Add(context_len, op.Shape(llama[0], start=1, end=2))
        rotary, keep = self.positions(op, h, w, tokens, text, hidden)

        for i, block in enumerate(self.double_stream_blocks):
            joint_text = op.Concat(context, llama[i], axis=1)
            hidden, joint_text = block(op, hidden, joint_text, temb, rotary, keep)
            context = op.Slice(joint_text, _ints(op, [0]), context_len, _ints(op, [1]))
        joint = op.Concat(hidden, context, axis=1)
        joint_len = op.Shape(joint, start=1, end=2)
        for i, block in enumerate(self.single_stream_blocks, start=c.num_layers):
            x = block(op, op.Concat(joint, llama[i], axis=1), temb, rotary, keep)
            joint = op.Slice(x, _ints(op, [0]), joint_len, _ints(op, [1]))
        image = op.Slice(joint, _ints(op, [0]), real, _ints(op, [1]))  # the real patches
        return unpatchify(op, self.final_layer(op, image, temb), h, w, p, c.out_channels)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        t5, llama = c.caption_channels
        inputs = {
            "hidden_states": (None, ["batch", c.in_channels, "latent_height", "latent_width"]),
            "timestep": (None, ["batch"]),
            "encoder_hidden_states_t5": (None, ["batch", "sequence", t5]),
            "encoder_hidden_states_llama3": (
                None,
                ["llama_layers", "batch", "llama_sequence", llama],
            ),
            "pooled_embeds": (None, ["batch", c.text_emb_dim]),
        }
        outputs = {"out_hidden_states": ["batch", c.out_channels, "latent_height", "latent_width"]}

        def forward(op, **values):
            return {"out_hidden_states": self(op, **values)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"HiDreamImageTransformer2DModel": HiDreamImageTransformer2DModel}
