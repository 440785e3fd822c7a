"""IP-Adapter Plus and FaceID image projections, named as the original checkpoints name them.

- Plus (``image_proj.latents``): the perceiver ``Resampler``: learned query tokens
  attend, four times, over CLIP's penultimate hidden states and themselves
  (diffusers' ``IPAdapterPlusImageProjection``).
- FaceID (``image_proj.norm`` beside ``image_proj.proj.0``/``proj.2``): an MLP from a
  face-recognition embedding to ``num_tokens`` tokens, LayerNorm on each
  (``IPAdapterFaceIDImageProjection``).
- FaceID Plus / Plus v2 (``image_proj.perceiver_resampler.*``): the FaceID MLP's tokens
  are the queries of a resampler over CLIP's penultimate states
  (``IPAdapterFaceIDPlusImageProjection``). Plus v2's ``shortcut`` adds the MLP's tokens
  back, ``id + scale * resampled``; that choice is the caller's (the checkpoints are
  alike), so the graph gives both and the runner adds them.

Attention heads are 64 wide, as both the original code and diffusers' converter fix them.
"""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError

HEAD_DIM = 64


class PerceiverAttention(nn.Module):
    """The latents attend over the image states and themselves (``norm1``: states, ``norm2``:
    latents); ``to_kv`` holds the keys' rows, then the values'."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        inner = heads * HEAD_DIM
        self.heads = heads
        self.norm1 = LayerNorm(dim)
        self.norm2 = LayerNorm(dim)
        self.to_q = Linear(dim, inner, bias=False)
        self.to_kv = Linear(dim, 2 * inner, bias=False)
        self.to_out = Linear(inner, dim, bias=False)

    def forward(self, op, x, latents):
        x, latents = self.norm1(op, x), self.norm2(op, latents)
        kv = self.to_kv(op, op.Concat(x, latents, axis=-2))
        k, v = op.Split(kv, num_outputs=2, axis=-1, _outputs=2)
        q = self.to_q(op, latents)
        return self.to_out(
            op, bidirectional_attention(op, q, k, v, None, self.heads, HEAD_DIM**-0.5)
        )


def _feed_forward(dim: int, inner: int) -> nn.ModuleList:
    """``0`` LayerNorm, ``1`` Linear, GELU (``2``, no weights), ``3`` Linear; no biases."""
    return nn.ModuleList(
        [
            LayerNorm(dim),
            Linear(dim, inner, bias=False),
            nn.Module(),
            Linear(inner, dim, bias=False),
        ]
    )


class PerceiverResampler(nn.Module):
    """``proj_in`` the image states, ``depth`` attention + feed-forward layers over the given
    latents (each with its residual), ``proj_out``, ``norm_out``."""

    def __init__(self, config) -> None:
        super().__init__()
        dim = config.resampler_dim
        self.proj_in = Linear(config.image_embed_dim, dim, bias=True)
        self.layers = nn.ModuleList(
            [
                nn.ModuleList(
                    [PerceiverAttention(dim, config.heads), _feed_forward(dim, config.ff_inner)]
                )
                for _ in range(config.depth)
            ]
        )
        self.proj_out = Linear(dim, config.cross_attention_dim, bias=True)
        self.norm_out = LayerNorm(config.cross_attention_dim)

    def forward(self, op, image_embeds, latents):
        x = self.proj_in(op, image_embeds)
        for attn, ff in self.layers:
            latents = op.Add(attn(op, x, latents), latents)
            hidden = ff[1](op, ff[0](op, latents))
            latents = op.Add(ff[3](op, op.Gelu(hidden)), latents)
        return self.norm_out(op, self.proj_out(op, latents))


class PlusImageProjection(PerceiverResampler):
    """IP-Adapter Plus: the resampler over its own learned ``latents`` [1, num_tokens, dim]."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.latents = nn.Parameter([1, config.num_tokens, config.resampler_dim])

    def forward(self, op, image_embeds):
        batch = op.Shape(image_embeds, start=0, end=1)
        repeats = op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        return super().forward(op, image_embeds, op.Expand(self.latents, repeats))


class FaceIDImageProjection(nn.Module):
    """``proj.0`` Linear, GELU, ``proj.2`` Linear to ``num_tokens`` tokens, ``norm`` on each."""

    def __init__(self, config, width: int | None = None) -> None:
        super().__init__()
        self.num_tokens = config.num_tokens
        width = width or config.cross_attention_dim
        id_dim = config.id_embed_dim or config.image_embed_dim
        self.proj = nn.ModuleList(
            [
                Linear(id_dim, config.id_inner, bias=True),
                nn.Module(),
                Linear(config.id_inner, config.num_tokens * width, bias=True),
            ]
        )
        self.norm = LayerNorm(width)

    def forward(self, op, id_embeds):
        tokens = self.proj[2](op, op.Gelu(self.proj[0](op, id_embeds)))
        tokens = op.Reshape(tokens, op.Constant(value_ints=[0, self.num_tokens, -1]))
        return self.norm(op, tokens)


class FaceIDPlusImageProjection(FaceIDImageProjection):
    """FaceID Plus: the face tokens (``resampler_dim`` wide) resampled over the image states;
    returns ``(resampled, face tokens)``."""

    def __init__(self, config) -> None:
        super().__init__(config, width=config.resampler_dim)
        self.perceiver_resampler = PerceiverResampler(config)

    def forward(self, op, id_embeds, image_embeds):
        tokens = super().forward(op, id_embeds)
        return self.perceiver_resampler(op, image_embeds, tokens), tokens


def _shape(shapes: dict[str, tuple[int, ...]], name: str, rank: int) -> tuple[int, ...]:
    shape = shapes.get(f"image_proj.{name}")
    if shape is None or len(shape) != rank:
        raise ConfigError(f"IP-Adapter: image_proj.{name} is missing or not {rank}-D")
    return shape


def _tokens(rows: int, width: int, name: str) -> int:
    if width <= 0 or rows % width:
        raise ConfigError(f"IP-Adapter: image_proj.{name} has {rows} rows, not tokens of {width}")
    return rows // width


def _resampler_layout(shapes: dict[str, tuple[int, ...]], prefix: str) -> dict[str, Any]:
    """The resampler fields of the ``image_proj.{prefix}`` tensors."""
    inner, dim = _shape(shapes, f"{prefix}layers.0.0.to_q.weight", 2)
    depth = 0
    while f"image_proj.{prefix}layers.{depth}.0.to_q.weight" in shapes:
        depth += 1
    proj_in = _shape(shapes, f"{prefix}proj_in.weight", 2)
    return dict(
        resampler_dim=dim,
        heads=_tokens(inner, HEAD_DIM, f"{prefix}layers.0.0.to_q.weight (heads of 64)"),
        depth=depth,
        ff_inner=_shape(shapes, f"{prefix}layers.0.1.1.weight", 2)[0],
        image_embed_dim=proj_in[1],
        cross_attention_dim=_shape(shapes, f"{prefix}proj_out.weight", 2)[0],
    )


def plus_or_faceid_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any] | None:
    """The config fields of a Plus, FaceID or FaceID Plus projection, else None."""
    if "image_proj.latents" in shapes:
        layout = _resampler_layout(shapes, "")
        return dict(kind="plus", num_tokens=_shape(shapes, "latents", 3)[1], **layout)
    if "image_proj.norm.weight" not in shapes or "image_proj.proj.0.weight" not in shapes:
        return None
    id_inner, id_dim = _shape(shapes, "proj.0.weight", 2)
    rows = _shape(shapes, "proj.2.weight", 2)[0]
    if "image_proj.perceiver_resampler.proj_in.weight" in shapes:
        layout = _resampler_layout(shapes, "perceiver_resampler.")
        tokens = _tokens(rows, layout["resampler_dim"], "proj.2.weight")
        return dict(
            kind="faceid-plus", id_embed_dim=id_dim, id_inner=id_inner, num_tokens=tokens, **layout
        )
    cross = _shape(shapes, "norm.weight", 1)[0]
    return dict(
        kind="faceid",
        image_embed_dim=id_dim,
        id_inner=id_inner,
        cross_attention_dim=cross,
        num_tokens=_tokens(rows, cross, "proj.2.weight"),
    )
