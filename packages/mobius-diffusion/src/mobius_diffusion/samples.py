"""Sample inputs of a diffusion component's graphs, for ``mobius build --validate``.

Each graph input gets a value of the shape the graph declares, its named axes set
small (:func:`axis_sizes`) from the component's config as the build reads it (its
family's config class, :func:`component_config`): sizes the family's downsampling,
patches and position tables accept. Inputs with a meaning of their own get values
a pipeline would pass (:func:`sample_feeds`); every other float input is seeded noise.
numpy only, but CogVideoX's rotary tables, which come from diffusers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mobius.errors import MobiusError
from mobius_diffusion.pipelines.lcm import guidance_scale_embedding

#: Rows of every sample batch.
BATCH = 2
#: Text tokens of the conditioning inputs (``sequence``).
TEXT_TOKENS = 5
#: Image tokens of an IP-Adapter's ``full`` projection.
IMAGE_EMBED_TOKENS = 5
#: The latent grid (rows, columns) most families are fed, in patches or blocks.
GRID = (2, 3)
SEED = 0

#: Timesteps of flow-matching transformers, which take them in [0, 1] (Flux), and of the others.
FLOW_TIMESTEPS = {
    "FluxTransformer2DModel",
    "ChromaTransformer2DModel",
    "AuraFlowTransformer2DModel",
    "Lumina2Transformer2DModel",
    "QwenImageTransformer2DModel",
}
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def component_config(class_name: str, source: Path, registry=None):
    """The component's config as its family reads it in a build (``config_class.from_hf``).

    ``source`` is the component's directory (``config.json`` names ``_class_name``) or
    a lone weights file (an IP-Adapter), whose config the family tells from its tensors.
    """
    from mobius import registry as default_registry
    from mobius_diffusion.config import ComponentConfig

    registry = registry or default_registry
    entry = registry.get(class_name)
    if Path(source).is_file():
        from mobius.weights import SafetensorsCheckpoint
        from mobius_diffusion.source import weights_file_config

        _, fields = weights_file_config(registry, source, SafetensorsCheckpoint.open(source))
    else:
        from mobius.source import read_json

        fields = ComponentConfig(read_json(Path(source) / "config.json"))
    return entry.config_class().from_hf(fields)


def axis_sizes(class_name: str, config) -> dict[str, int]:
    """The sample's size of each named axis of the component's graphs."""
    rows, columns = GRID
    sizes = {"batch": BATCH, "sequence": TEXT_TOKENS, "image_tokens": IMAGE_EMBED_TOKENS}
    if class_name in ("AutoencoderKL", "AutoencoderKLCogVideoX"):
        # each down block but the last halves the image
        scale = 2 ** (len(config.block_out_channels) - 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
        )
        if class_name == "AutoencoderKLCogVideoX":  # 1 + k * compression frames -> 1 + k
            compression = int(config.temporal_compression_ratio)
            sizes.update(frames=1 + 2 * compression, latent_frames=3)
    elif class_name in ("AutoencoderKLWan", "AutoencoderKLQwenImage"):
        # 1 + 4k frames: diffusers drops the others
        scale = 2 ** (len(config.dim_mult) - 1) * (config.patch_size or 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
            frames=9,
            latent_frames=3,
        )
    elif class_name in ("UNet2DConditionModel", "ControlNetModel"):
        scale = 2 ** (len(config.block_out_channels) - 1)
        sizes.update(_grid("latent", rows * scale, columns * scale))
        if class_name == "ControlNetModel":  # the condition image, at the pipeline's pixels
            conditioning = 2 ** (len(config.conditioning_embedding_out_channels) - 1)
            sizes.update(_grid("", rows * scale * conditioning, columns * scale * conditioning))
    elif class_name == "AutoencoderDC":  # each stage but the last halves the image
        scale = 2 ** (len(config.encoder_block_out_channels) - 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
        )
    elif class_name in (
        "SD3Transformer2DModel",
        "PixArtTransformer2DModel",
        "SanaTransformer2DModel",
        "Lumina2Transformer2DModel",
        "CogView4Transformer2DModel",
    ):
        sizes.update(_grid("latent", 2 * rows * config.patch_size, 2 * columns * config.patch_size))
    elif class_name == "DiTTransformer2DModel":  # square latents
        sizes.update(_grid("latent", 4 * config.patch_size, 4 * config.patch_size))
    elif class_name == "FluxTransformer2DModel":
        sizes["image_tokens"] = 4 * rows * columns  # packed latents of a 4x6 grid
    elif class_name == "AuraFlowTransformer2DModel":  # a 4x6 patch grid: the learned table's middle
        sizes.update(_grid("latent", 2 * rows * config.patch_size, 2 * columns * config.patch_size))
    elif class_name == "ChromaTransformer2DModel":  # Flux's latents; a mask over [text, image]
        sizes.update(image_tokens=4 * rows * columns, joint_tokens=TEXT_TOKENS + 4 * rows * columns)
    elif class_name == "QwenImageTransformer2DModel":  # one image: packed 2x3 patch grid
        sizes.update(image_tokens=rows * columns, images=1)
    elif class_name == "CogVideoXTransformer3DModel":
        sizes.update(_cogvideox_sizes(config))
    elif class_name == "WanTransformer3DModel":
        sizes.update(_wan_sizes(config))
    elif class_name == "T2IAdapter":  # a multiple of every adapter layout's downscaling
        scale = config.downscale_factor * 2 ** len(config.channels)
        sizes.update(_grid("", rows * scale, columns * scale))
    return sizes


def _grid(prefix: str, height: int, width: int) -> dict[str, int]:
    names = ("height", "width") if not prefix else (f"{prefix}_height", f"{prefix}_width")
    return dict(zip(names, (height, width), strict=True))


def _wan_sizes(config) -> dict[str, int]:
    """Two patches of frames on a 2x3 patch grid; an I2V model's text is 512 tokens, where
    diffusers' attention cuts its context into image and text."""
    frame_patch, row_patch, column_patch = config.patch_size
    sizes = dict(
        frames=2 * frame_patch, **_grid("latent", GRID[0] * row_patch, GRID[1] * column_patch)
    )
    sizes["video_tokens"] = 2 * GRID[0] * GRID[1]  # TI2V's per-token timesteps
    if config.image_dim:
        sizes["sequence"] = 512
    if config.pos_embed_seq_len:  # the first and the last frame's states, two rows per prompt
        sizes.update(image_batch=2 * BATCH, image_tokens=config.pos_embed_seq_len // 2)
    return sizes


def _cogvideox_sizes(config) -> dict[str, int]:
    """Two patches of frames; a 2x3 patch grid, or the sample size learned positions need."""
    patch, frame_patch = config.patch_size, config.patch_size_t or 1
    if config.use_learned_positional_embeddings:  # diffusers refuses another size
        height, width = config.sample_height, config.sample_width
    else:
        height, width = GRID[0] * patch, GRID[1] * patch
    frames = 2 * frame_patch
    tokens = (frames // frame_patch) * (height // patch) * (width // patch)
    return dict(frames=frames, **_grid("latent", height, width), video_tokens=tokens)


def sample_feeds(class_name: str, config, session) -> dict[str, np.ndarray]:
    """A value for every input of ``session`` (an ONNX Runtime session of one graph)."""
    sizes = axis_sizes(class_name, config)
    rng = np.random.default_rng(SEED)
    feeds = {}
    for info in session.get_inputs():
        shape = [sizes.get(d, 1) if isinstance(d, str) or d is None else d for d in info.shape]
        value = _named_value(info.name, class_name, config, shape, sizes)
        if value is None:
            value = rng.standard_normal(shape).astype(np.float32)
        if info.type in _ORT_TYPES:
            value = value.astype(_ORT_TYPES[info.type])
        elif info.type != "tensor(int64)":
            raise MobiusError(f"--validate: {info.name} is {info.type}: no sample for it")
        feeds[info.name] = value
    return feeds


def _named_value(name: str, class_name: str, config, shape, sizes) -> np.ndarray | None:
    """The value of an input with a meaning of its own, or None for noise."""
    if name == "timestep":
        steps = [0.25, 0.8] if class_name in FLOW_TIMESTEPS else [250.0, 800.0]
        return np.resize(np.asarray(steps, np.float32), shape)
    if name == "guidance":
        return np.resize(np.asarray([3.5, 1.0], np.float32), shape)
    if name == "ofs":
        return np.full(shape, 2.0, np.float32)
    if name == "timestep_cond":  # LCM: the pipeline's embedding of guidance_scale - 1
        scales = np.resize(np.asarray([8.0, 2.0], np.float32), shape[:1])
        return guidance_scale_embedding(scales - 1, shape[1])
    if name == "conditioning_scale":
        return np.full(shape, 0.75, np.float32)
    # The mid block's adapter feature (after one per down block): diffusers adds it only in the
    # mid block's own shape, which a sample's [batch, channels, 1, 1] is not; zeros agree with
    # the graph's broadcast add.
    feature = "down_intrablock_additional_residuals."
    if name.startswith(feature) and int(name[len(feature) :]) >= len(config.down_block_types):
        return np.zeros(shape, np.float32)
    if name == "class_labels":
        return np.arange(shape[0], dtype=np.int64)[::-1] % config.num_embeds_ada_norm
    if name in ("encoder_attention_mask", "encoder_hidden_states_mask"):
        # the second prompt is shorter: its end is padding
        mask = np.ones(shape, np.int64)
        mask[1:, -2:] = 0
        return mask
    if name == "attention_mask" and class_name == "ChromaTransformer2DModel":
        # float 0/1 over [text, image]: the second prompt ends in padding
        mask = np.ones(shape, np.float32)
        mask[1:, sizes["sequence"] - 2 : sizes["sequence"]] = 0
        return mask
    if name == "time_ids":  # SDXL: original size, crop corner, target size
        rows = [[64, 48, 0, 8, 64, 64], [32, 32, 4, 0, 32, 32]]
        return np.resize(np.asarray(rows, np.float32), shape)
    if name == "resolution":
        return np.resize(np.asarray([[64, 96], [96, 64]], np.float32), shape)
    if name in ("original_size", "target_size"):  # CogView4: pixel sizes (height, width)
        return np.resize(np.asarray([[64, 96], [96, 64]], np.float32), shape)
    if name == "crop_coords":
        return np.resize(np.asarray([[0, 0], [8, 4]], np.float32), shape)
    if name == "aspect_ratio":
        return np.resize(np.asarray([[1.5], [0.75]], np.float32), shape)
    if name == "img_ids":  # the Flux pipeline's position of each packed token
        from mobius_diffusion.pipeline import latent_image_ids

        return latent_image_ids(2 * GRID[0], 2 * GRID[1])
    if name == "img_shapes":  # Qwen-Image: each image's (frames, rows, columns) of patches
        return np.array([[1, *GRID]], np.int64)
    if name == "txt_ids":  # the Flux pipelines pass zeros
        return np.zeros(shape, np.float32)
    if name in ("image_rotary_cos", "image_rotary_sin"):
        try:
            return cogvideox_rotary_tables(config, sizes)[name == "image_rotary_sin"]
        except ImportError:  # no diffusers (a smoke run): no rotation, still a finite run
            return np.full(shape, float(name == "image_rotary_cos"), np.float32)
    return None


def cogvideox_rotary_tables(config, sizes: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``image_rotary_emb`` (cos, sin) as the CogVideoX pipelines compute it for the sample's
    latent: a linspace grid with crops for 1.0, a slice grid for 1.5 (``patch_size_t``)."""
    from diffusers.models.embeddings import get_3d_rotary_pos_embed
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

    patch, frame_patch = config.patch_size, config.patch_size_t
    grid = (sizes["latent_height"] // patch, sizes["latent_width"] // patch)
    base_height, base_width = config.sample_height // patch, config.sample_width // patch
    if frame_patch is None:
        crops = get_resize_crop_region_for_grid(grid, base_width, base_height)
        tables = get_3d_rotary_pos_embed(config.attention_head_dim, crops, grid, sizes["frames"])
    else:
        tables = get_3d_rotary_pos_embed(
            config.attention_head_dim,
            None,
            grid,
            sizes["frames"] // frame_patch,
            grid_type="slice",
            max_size=(base_height, base_width),
        )
    cos, sin = tables
    return cos.float().numpy(), sin.float().numpy()


def feeds_as_torch(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """The feeds as float32 / int64 torch tensors (a float16 build's feeds upcast)."""
    import torch

    return {
        k: torch.from_numpy(v.astype(np.float32) if v.dtype == np.float16 else v)
        for k, v in feeds.items()
    }
