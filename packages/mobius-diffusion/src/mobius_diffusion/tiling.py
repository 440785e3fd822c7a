"""VAE decoding in pieces: Wan's frame by frame (:func:`decode_stepwise`), and in overlapping
spatial tiles blended at the seams (:func:`decode_tiled`).

diffusers decodes a Wan (or Qwen-Image) latent video one latent frame at a time, each
causal conv carrying its last input frames to the next; :func:`decode_stepwise` runs the
VAE's ``decoder_step/model`` so (see :mod:`mobius_diffusion.models.autoencoder_kl_wan`),
and memory stays that of one latent frame however long the video.

diffusers' ``vae.enable_tiling()`` decodes a large latent this way so that peak memory
follows the tile, not the image (or, for a video VAE, one tile of every frame). The
result differs from a whole decode near the seams, so it is opt-in here too
(``mobius generate --vae-tiling``), and equals diffusers' tiled decode.

Each VAE class tiles with its own sizes (:func:`tile_plan`, from its ``config.json`` as
diffusers sets them up); :func:`decode_tiled` is the one algorithm they share: tiles
start every ``stride`` latents, each is decoded whole, blended linearly with the
already-blended tile above and to its left over ``blend`` pixels, and its first
``keep`` pixels are kept.

One difference remains for Wan and Qwen-Image: diffusers blends their tiles before its
final clamp to [-1, 1], while their decoder graphs clamp (as diffusers' ``decode()``
does), so a pixel that saturates inside a blend band is blended clamped here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mobius.errors import ConfigError


@dataclass(frozen=True)
class AxisTiles:
    """One spatial axis: latents per tile, latents between tile starts, and in pixels the
    rows blended with the previous tile and the rows each tile keeps."""

    tile: int
    stride: int
    blend: int
    keep: int


@dataclass(frozen=True)
class TilePlan:
    """How a VAE class tiles: rows, then columns; ``factor`` pixels per latent on a side."""

    rows: AxisTiles
    cols: AxisTiles
    factor: int

    def applies(self, latents: np.ndarray) -> bool:
        """Whether diffusers would tile ``latents`` (larger than one tile on a side)."""
        return latents.shape[-2] > self.rows.tile or latents.shape[-1] > self.cols.tile


def _overlap_axis(sample_tile: int, factor: int, overlap: float) -> AxisTiles:
    """Tiles of ``sample_tile`` pixels overlapping by the fraction ``overlap`` (AutoencoderKL,
    CogVideoX): strides and blends rounded down as diffusers rounds them."""
    tile = int(sample_tile / factor)
    blend = int(sample_tile * overlap)
    return AxisTiles(tile, int(tile * (1 - overlap)), blend, sample_tile - blend)


def _stride_axis(sample_tile: int, sample_stride: int, factor: int) -> AxisTiles:
    """Tiles of ``sample_tile`` pixels every ``sample_stride`` pixels (Wan, Qwen-Image)."""
    return AxisTiles(
        sample_tile // factor, sample_stride // factor, sample_tile - sample_stride, sample_stride
    )


def _positive_int(config: dict, key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, (list, tuple)) and value:
        value = value[0]  # AutoencoderKL's sample_size may be [height, width]: diffusers takes [0]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"vae/config.json {key} is {value!r}, not a positive integer")
    return value


def tile_plan(vae_config: dict) -> TilePlan:
    """The tiles diffusers' ``enable_tiling()`` decodes this VAE in, by its ``_class_name``.

    Raises:
        ConfigError: a VAE class without a tiled decode here (named), or a config value
            of the wrong type.
    """
    class_name = vae_config.get("_class_name")
    levels = vae_config.get("block_out_channels")
    if class_name == "AutoencoderKL":
        factor = 2 ** (len(levels) - 1)
        size = _positive_int(vae_config, "sample_size")
        axis = _overlap_axis(size, factor, 0.25)
        return TilePlan(axis, axis, factor)
    if class_name == "AutoencoderKLCogVideoX":
        factor = 2 ** (len(levels) - 1)
        rows = _overlap_axis(_positive_int(vae_config, "sample_height", 480) // 2, factor, 1 / 6)
        cols = _overlap_axis(_positive_int(vae_config, "sample_width", 720) // 2, factor, 1 / 5)
        return TilePlan(rows, cols, factor)
    if class_name in ("AutoencoderKLWan", "AutoencoderKLQwenImage"):
        if vae_config.get("patch_size") is not None:
            raise ConfigError(
                f"--vae-tiling: a patchified {class_name} (patch_size "
                f"{vae_config['patch_size']}, Wan 2.2's) has no tiled decode here"
            )
        if class_name == "AutoencoderKLWan":  # a config value (default 8) in Wan
            factor = _positive_int(vae_config, "scale_factor_spatial", 8)
        else:  # Qwen-Image counts its temporal downsampling levels (3 by default)
            factor = 2 ** len(vae_config.get("temperal_downsample") or [False, True, True])
        axis = _stride_axis(256, 192, factor)  # diffusers' defaults for both
        return TilePlan(axis, axis, factor)
    raise ConfigError(
        f"--vae-tiling: mobius has no tiled decode for a {class_name}; tiled: AutoencoderKL, "
        "AutoencoderKLCogVideoX, AutoencoderKLWan, AutoencoderKLQwenImage"
    )


def _blend(previous: np.ndarray, tile: np.ndarray, axis: int, extent: int) -> None:
    """Fade ``tile``'s first rows along ``axis`` in from ``previous``'s last, in place."""
    extent = min(previous.shape[axis], tile.shape[axis], extent)
    if extent <= 0:
        return
    weight = (np.arange(extent) / extent).astype(np.float32)
    shape = [1] * tile.ndim
    shape[axis] = extent
    weight = weight.reshape(shape)
    head = [slice(None)] * tile.ndim
    head[axis] = slice(0, extent)
    tail = [slice(None)] * tile.ndim
    tail[axis] = slice(previous.shape[axis] - extent, None)
    tile[tuple(head)] = previous[tuple(tail)] * (1 - weight) + tile[tuple(head)] * weight


def decode_tiled(
    decode: Callable[[np.ndarray], np.ndarray], latents: np.ndarray, plan: TilePlan
) -> np.ndarray:
    """``decode`` (a VAE decoder: latents ``[..., h, w]`` to pixels ``[..., h*f, w*f]``) run
    tile by tile over ``latents`` as ``plan`` says, the tiles blended into one output."""
    height, width = latents.shape[-2:]
    rows = [
        [
            np.array(decode(latents[..., i : i + plan.rows.tile, j : j + plan.cols.tile]))
            for j in range(0, width, plan.cols.stride)
        ]
        for i in range(0, height, plan.rows.stride)
    ]
    # Each tile blends with its neighbours as already blended (diffusers blends in place).
    pieces = []
    for i, row in enumerate(rows):
        for j, tile in enumerate(row):
            if i > 0:
                _blend(rows[i - 1][j], tile, -2, plan.rows.blend)
            if j > 0:
                _blend(row[j - 1], tile, -1, plan.cols.blend)
        kept = [tile[..., : plan.rows.keep, : plan.cols.keep] for tile in row]
        pieces.append(np.concatenate(kept, axis=-1))
    image = np.concatenate(pieces, axis=-2)
    return image[..., : height * plan.factor, : width * plan.factor]


#: A decoder step's graph: its feeds to its outputs by name.
Step = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def decode_stepwise(
    step: Step, past_shapes: Mapping[str, Sequence], latents: np.ndarray
) -> np.ndarray:
    """diffusers' frame-by-frame decode: ``step`` (a ``decoder_step/model``) run on each latent
    frame of ``latents`` ``[b, c, frames, h, w]`` in turn, each step fed the
    ``present_frames.{i}`` of the one before as ``past_frames.{i}``; the first step gets none.

    ``past_shapes`` maps each ``past_frames.{i}`` input to its declared shape (ints and the
    contract's axis names ``batch``, ``past_frames``, ``latent_height*s``,
    ``latent_width*s``), from which the first step's empty pasts are made.

    Raises:
        ConfigError: an input axis of another name (not a decoder step graph).
    """
    batch, _, frames, height, width = latents.shape
    sizes = {"batch": batch, "past_frames": 0, "latent_height": height, "latent_width": width}
    past = {
        name: np.zeros([_axis_size(name, axis, sizes) for axis in shape], np.float32)
        for name, shape in past_shapes.items()
    }
    pieces = []
    for k in range(frames):
        outputs = step({"latent_sample": np.ascontiguousarray(latents[:, :, k : k + 1]), **past})
        pieces.append(outputs.pop("sample"))
        past = {f"past_frames.{n.removeprefix('present_frames.')}": v for n, v in outputs.items()}
        if set(past) != set(past_shapes):
            raise ConfigError(
                f"a decoder step gave {sorted(outputs)}, not a present_frames.{{i}} per past_frames"
            )
    return np.concatenate(pieces, axis=2)


def _axis_size(name: str, axis, sizes: dict[str, int]) -> int:
    """The size of a decoder step input's ``axis``: an int, or ``name*factor`` of ``sizes``."""
    if isinstance(axis, int):
        return axis
    base, _, factor = str(axis).partition("*")
    if base not in sizes or not (factor or "1").isdigit():
        raise ConfigError(f"decoder step input {name} has an axis {axis!r} of no known size")
    return sizes[base] * int(factor or 1)
