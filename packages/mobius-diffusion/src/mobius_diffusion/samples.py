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
    "FluxControlNetModel",
    "Flux2Transformer2DModel",
    "ChromaTransformer2DModel",
    "AuraFlowTransformer2DModel",
    "Lumina2Transformer2DModel",
    "ZImageTransformer2DModel",
    "QwenImageTransformer2DModel",
    "QwenImageControlNetModel",
    "AutoencoderKLLTXVideo",  # its decode timestep
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
    if class_name in ("AutoencoderKL", "AutoencoderKLFlux2", "AutoencoderKLCogVideoX", "VQModel"):
        # each down block but the last halves the image
        scale = 2 ** (len(config.block_out_channels) - 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
        )
        if class_name == "AutoencoderKLCogVideoX":  # 1 + k * compression frames -> 1 + k
            compression = int(config.temporal_compression_ratio)
            sizes.update(frames=1 + 2 * compression, latent_frames=3)
    elif class_name == "AutoencoderKLHunyuanVideo":  # 1 + 4k frames -> 1 + k
        scale = config.spatial_compression_ratio
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
            frames=5,
            latent_frames=2,
        )
    elif class_name == "AutoencoderKLMochi":  # 1 + 2k frames -> 3, k the temporal compression
        scale = int(np.prod(config.spatial_expansions))
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
            frames=1 + 2 * config.temporal_compression,
            latent_frames=3,
        )
    elif class_name in ("AutoencoderKLWan", "AutoencoderKLQwenImage"):
        # 1 + 4k frames: diffusers drops the others
        scale = 2 ** (len(config.dim_mult) - 1) * (config.patch_size or 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
            frames=9,
            latent_frames=3,
            past_frames=0,  # decoder_step/model: a first step, as diffusers' decode starts
        )
        for level in range(1, len(config.dim_mult)):  # its past frames' grids
            for axis in ("latent_height", "latent_width"):
                sizes[f"{axis}*{2**level}"] = sizes[axis] * 2**level
    elif class_name in (
        "UNet2DConditionModel",
        "UNet2DModel",
        "ControlNetModel",
        "UNetMotionModel",
        "Kandinsky3UNet",
    ):
        scale = 2 ** (len(config.block_out_channels) - 1)
        sizes.update(_grid("latent", rows * scale, columns * scale))
        if class_name == "UNetMotionModel":  # AnimateDiff: a few frames, within its positions
            sizes["frames"] = min(3, config.motion_max_seq_length)
        if class_name == "ControlNetModel":  # the condition image, at the pipeline's pixels
            conditioning = 2 ** (len(config.conditioning_embedding_out_channels) - 1)
            sizes.update(_grid("", rows * scale * conditioning, columns * scale * conditioning))
    elif class_name == "AutoencoderTiny":  # a stride-2 conv per encoder stage after the first
        scale = config.encoder_scale
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
        )
    elif class_name == "AutoencoderDC":  # each stage but the last halves the image
        scale = 2 ** (len(config.encoder_block_out_channels) - 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
        )
    elif class_name in (
        "SD3Transformer2DModel",
        "SD3ControlNetModel",
        "PixArtTransformer2DModel",
        "SanaTransformer2DModel",
        "SanaControlNetModel",
        "Lumina2Transformer2DModel",
        "ZImageTransformer2DModel",
        "CogView4Transformer2DModel",
        "CogView3PlusTransformer2DModel",
    ):
        sizes.update(_grid("latent", 2 * rows * config.patch_size, 2 * columns * config.patch_size))
    elif class_name == "HunyuanDiT2DModel":  # a 2x3 patch grid: a crop of the RoPE's square
        sizes.update(_grid("latent", rows * config.patch_size, columns * config.patch_size))
    elif class_name == "DiTTransformer2DModel":  # square latents
        sizes.update(_grid("latent", 4 * config.patch_size, 4 * config.patch_size))
    elif class_name in ("FluxTransformer2DModel", "Flux2Transformer2DModel"):
        sizes["image_tokens"] = 4 * rows * columns  # packed latents of a 4x6 grid
    elif class_name == "FluxControlNetModel":  # and a hint image 8x the grid of patches
        sizes["image_tokens"] = 4 * rows * columns
        sizes.update(_grid("", 16 * rows * config.patch_size, 16 * columns * config.patch_size))
    elif class_name == "AuraFlowTransformer2DModel":  # a 4x6 patch grid: the learned table's middle
        sizes.update(_grid("latent", 2 * rows * config.patch_size, 2 * columns * config.patch_size))
    elif class_name == "ChromaTransformer2DModel":  # Flux's latents; a mask over [text, image]
        sizes.update(image_tokens=4 * rows * columns, joint_tokens=TEXT_TOKENS + 4 * rows * columns)
    elif class_name in ("QwenImageTransformer2DModel", "QwenImageControlNetModel"):
        # one image: packed 2x3 patch grid
        sizes.update(image_tokens=rows * columns, images=1)
    elif class_name == "CogVideoXTransformer3DModel":
        sizes.update(_cogvideox_sizes(config))
    elif class_name in (
        "WanTransformer3DModel",
        "WanVACETransformer3DModel",
        "SkyReelsV2Transformer3DModel",
    ):
        sizes.update(_wan_sizes(config))
    elif class_name == "MochiTransformer3DModel":  # two frames of a 2x3 patch grid
        patch = config.patch_size
        sizes.update(frames=2, **_grid("latent", rows * patch, columns * patch))
    elif class_name == "AutoencoderKLLTXVideo":
        sizes.update(_ltx_vae_sizes(config))
    elif class_name == "LTXVideoTransformer3DModel":  # packed tokens of two frames of 2x3
        sizes["video_tokens"] = 2 * rows * columns
    elif class_name == "HunyuanVideoTransformer3DModel":  # two patches of frames, 2x3 patches
        patch = config.patch_size
        sizes.update(frames=2 * config.patch_size_t, **_grid("latent", 2 * patch, 3 * patch))
    elif class_name == "HiDreamImageTransformer2DModel":  # a 4x6 patch grid; each Llama layer read
        patch = config.patch_size
        sizes.update(_grid("latent", 2 * rows * patch, 2 * columns * patch))
        sizes.update(llama_layers=max(config.llama_layers) + 1, llama_sequence=TEXT_TOKENS)
    elif class_name == "AutoencoderKLTemporalDecoder":  # SVD's: frames stay frames
        scale = 2 ** (len(config.block_out_channels) - 1)
        sizes.update(
            _grid("latent", 2 * rows, 2 * columns),
            **_grid("", 2 * rows * scale, 2 * columns * scale),
            frames=3,
        )
    elif class_name == "UNetSpatioTemporalConditionModel":  # SVD: one image embedding token
        scale = 2 ** (len(config.block_out_channels) - 1)
        sizes.update(_grid("latent", rows * scale, columns * scale), frames=3, sequence=1)
    elif class_name == "StableCascadeUNet":  # patches, halved by each strided conv (any size runs)
        scale = config.patch_size * 2 ** (len(config.block_out_channels) - 1)
        sizes.update(_grid("latent", rows * scale, columns * scale), image_tokens=1)
        sizes.update(_grid("effnet", rows, columns))
    elif class_name == "PaellaVQModel":  # the pixel unshuffle, then halved by each level after one
        scale = config.up_down_scale_factor * 2 ** (config.levels - 1)
        sizes.update(_grid("latent", rows, columns), **_grid("", rows * scale, columns * scale))
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
    sizes["frame_patches"] = 2  # SkyReels-V2's diffusion forcing: a timestep per frame
    sizes["control_frames"] = sizes["frames"]  # VACE's control latents
    if config.image_dim:
        sizes["sequence"] = 512
    if config.pos_embed_seq_len:  # the first and the last frame's states, two rows per prompt
        sizes.update(image_batch=2 * BATCH, image_tokens=config.pos_embed_seq_len // 2)
    return sizes


def _ltx_vae_sizes(config) -> dict[str, int]:
    """Two latent frames of a 2x3 grid, and the video the encoder makes them from; the
    decoder's noise at each doubling of the grid."""
    spatial, temporal = config.patch_size, 1
    blocks = zip(
        config.spatio_temporal_scaling,
        config.downsample_type,
        config.down_block_types,
        strict=True,
    )
    for scaled, kind, block in blocks:  # 0.9.5's blocks fold space, time or both
        if scaled and block == "LTXVideo095DownBlock3D":
            spatial *= 2 if kind != "temporal" else 1
            temporal *= 2 if kind != "spatial" else 1
        elif scaled:
            spatial, temporal = 2 * spatial, 2 * temporal
    rows, columns = GRID
    sizes = dict(
        latent_frames=2,
        frames=1 + temporal,
        **_grid("latent", rows, columns),
        **_grid("", rows * spatial, columns * spatial),
    )
    for scale in (2, 4, 8, 16):
        sizes.update(
            {f"latent_height_x{scale}": rows * scale, f"latent_width_x{scale}": columns * scale}
        )
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
    if name == "timestep" and class_name == "UNetSpatioTemporalConditionModel":
        return np.resize(np.asarray([-0.4, 1.3], np.float32), shape)  # SVD's log(sigma) / 4
    if name == "timestep_ratio":  # Stable Cascade: the schedule's ratio, 1 to 0
        return np.resize(np.asarray([0.9, 0.35], np.float32), shape)
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
    if name in ("conditioning_scale", "ip_adapter_scale", "control_hidden_states_scale"):
        return np.full(shape, 0.75, np.float32)
    if name == "fps":  # SkyReels-V2: 0 for 16 fps, 1 for any other
        return np.resize(np.asarray([1, 0], np.int64), shape)
    if name == "controlnet_mode":  # a union ControlNet's control type per row
        return np.arange(shape[0], dtype=np.int64).reshape(shape)[::-1] % config.num_mode
    # The mid block's adapter feature (after one per down block): diffusers adds it only in the
    # mid block's own shape, which a sample's [batch, channels, 1, 1] is not; zeros agree with
    # the graph's broadcast add.
    feature = "down_intrablock_additional_residuals."
    if name.startswith(feature) and int(name[len(feature) :]) >= len(config.down_block_types):
        return np.zeros(shape, np.float32)
    if name == "class_labels":  # DiT's label table, or a class-conditional UNet2DModel's
        classes = getattr(config, "num_class_embeds", None) or config.num_embeds_ada_norm
        return np.arange(shape[0], dtype=np.int64)[::-1] % classes
    if name in (
        "encoder_attention_mask",
        "encoder_hidden_states_mask",
        "text_embedding_mask",
        "text_embedding_mask_t5",
    ) or (name == "attention_mask" and class_name == "PriorTransformer"):
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
    if name == "image_meta_size":  # HunyuanDiT: original size, target size, crop corner
        rows = [[1024, 768, 1024, 768, 0, 0], [512, 512, 768, 1024, 8, 4]]
        return np.resize(np.asarray(rows, np.float32), shape)
    if name == "style":  # HunyuanDiT learned one style
        return np.zeros(shape, np.int64)
    if name == "added_time_ids":  # SVD: fps - 1, motion bucket, noise augmentation
        return np.resize(np.asarray([[6, 127, 0.02], [3, 40, 0.5]], np.float32), shape)
    if name == "resolution":
        return np.resize(np.asarray([[64, 96], [96, 64]], np.float32), shape)
    if name in ("original_size", "target_size"):  # CogView4: pixel sizes (height, width)
        return np.resize(np.asarray([[64, 96], [96, 64]], np.float32), shape)
    if name == "crop_coords":
        return np.resize(np.asarray([[0, 0], [8, 4]], np.float32), shape)
    if name == "aspect_ratio":
        return np.resize(np.asarray([[1.5], [0.75]], np.float32), shape)
    if name == "img_ids" and class_name == "Flux2Transformer2DModel":
        from mobius_diffusion.pipelines.flux2 import latent_ids  # (0, row, column, 0)

        return latent_ids(2 * GRID[0], 2 * GRID[1])
    if name == "img_ids":  # the Flux pipeline's position of each packed token
        from mobius_diffusion.pipeline import latent_image_ids

        return latent_image_ids(2 * GRID[0], 2 * GRID[1])
    if name == "img_shapes":  # Qwen-Image: each image's (frames, rows, columns) of patches
        return np.array([[1, *GRID]], np.int64)
    if name == "video_shape":  # LTX-Video: the token grid (frames, rows, columns)
        return np.array([2, *GRID], np.int64)
    if name == "rope_interpolation_scale":  # the LTX pipeline's at 25 fps
        return np.array([8 / 25, 32, 32], np.float32)
    if name == "txt_ids" and class_name == "Flux2Transformer2DModel":
        from mobius_diffusion.pipelines.flux2 import text_ids  # (0, 0, 0, token)

        return text_ids(shape[0])
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
