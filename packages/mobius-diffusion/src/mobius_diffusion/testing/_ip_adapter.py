"""Random IP-Adapter Plus / FaceID image projections in the original checkpoint layout.

The shapes follow what diffusers' converter assumes of them (heads of 64, four resampler
layers with a feed-forward 4 times wide, FaceID Plus's four face tokens from an MLP twice
the face embedding's width), so that ``load_ip_adapter`` reads the same file.
"""

from __future__ import annotations

import numpy as np

#: The norms, whose weights are drawn near 1.
_NORMS = ("norm.weight", "norm1.weight", "norm2.weight", "norm_out.weight", ".1.0.weight")


def _resampler_shapes(prefix: str, embed: int, dim: int, out: int, heads: int) -> dict:
    shapes = {
        f"{prefix}proj_in.weight": (dim, embed),
        f"{prefix}proj_in.bias": (dim,),
        f"{prefix}proj_out.weight": (out, dim),
        f"{prefix}proj_out.bias": (out,),
        f"{prefix}norm_out.weight": (out,),
        f"{prefix}norm_out.bias": (out,),
    }
    for i in range(4):
        layer = f"{prefix}layers.{i}"
        for norm in ("0.norm1", "0.norm2", "1.0"):
            shapes |= {f"{layer}.{norm}.weight": (dim,), f"{layer}.{norm}.bias": (dim,)}
        shapes[f"{layer}.0.to_q.weight"] = (64 * heads, dim)
        shapes[f"{layer}.0.to_kv.weight"] = (128 * heads, dim)
        shapes[f"{layer}.0.to_out.weight"] = (dim, 64 * heads)
        shapes[f"{layer}.1.1.weight"] = (4 * dim, dim)
        shapes[f"{layer}.1.3.weight"] = (dim, 4 * dim)
    return shapes


def image_proj_shapes(
    kind: str, image_embed: int, cross: int, *, id_embed: int = 20, tokens: int = 4, heads: int = 2
) -> dict[str, tuple[int, ...]]:
    """The ``image_proj.*`` shapes of a ``kind`` ("plus", "faceid", "faceid-plus") projection:
    ``image_embed`` is CLIP's hidden width (Plus, FaceID Plus) or the face embedding's (FaceID)."""
    if kind == "plus":
        shapes = {"latents": (1, tokens, cross)}
        shapes |= _resampler_shapes("", image_embed, cross, cross, heads)
    else:
        face = image_embed if kind == "faceid" else id_embed
        shapes = {
            "proj.0.weight": (2 * face, face),
            "proj.0.bias": (2 * face,),
            "proj.2.weight": (tokens * cross, 2 * face),
            "proj.2.bias": (tokens * cross,),
            "norm.weight": (cross,),
            "norm.bias": (cross,),
        }
        if kind == "faceid-plus":
            shapes |= _resampler_shapes("perceiver_resampler.", image_embed, cross, cross, heads)
    return {f"image_proj.{name}": shape for name, shape in shapes.items()}


def random_image_proj(kind: str, image_embed: int, cross: int, seed: int = 0, **sizes) -> dict:
    """Random float32 ``image_proj.*`` tensors of :func:`image_proj_shapes` (norm weights
    near 1, every other tensor, biases included, around 0 with spread 0.3)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in image_proj_shapes(kind, image_embed, cross, **sizes).items():
        base = 1.0 if name.endswith(_NORMS) else 0.0
        tensors[name] = (base + 0.3 * rng.standard_normal(shape)).astype(np.float32)
    return tensors
