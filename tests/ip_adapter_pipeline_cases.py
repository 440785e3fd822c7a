"""A tiny random Stable Diffusion pipeline with an IP-Adapter, as diffusers runs one.

The pipeline is saved with its ``image_encoder`` (a ``CLIPVisionModelWithProjection``)
and ``feature_extractor`` (CLIP's image processor) and without the adapter; the
adapter is a separate single file in the original layout (``image_proj.*``,
``ip_adapter.{2k+1}.to_k_ip/to_v_ip.weight``), loaded into the diffusers pipeline with
``pipe.load_ip_adapter`` from that local file. Every parameter and tensor is random.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pipeline_cases import (
    _clip_text_encoder,
    _perturbed,
    _tiny_vae,
    make_sdxl_pipeline,
    tiny_clip_tokenizer,
)

CLIP_SIZE = 16  # the CLIP tower's image: 2 x 2 patches of 8
IMAGE_EMBED = 8  # its projection_dim: image_embeds, what a plain adapter projects
VISION_WIDTH = 16  # its hidden states' width, what a Full adapter projects
CROSS = 16  # the SD UNet's cross_attention_dim (the text encoder's width)
ADAPTER = "ip-adapter.safetensors"


def _image_encoder():
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    config = CLIPVisionConfig(
        hidden_size=VISION_WIDTH,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=CLIP_SIZE,
        patch_size=8,
        projection_dim=IMAGE_EMBED,
    )
    return CLIPVisionModelWithProjection(config)


FACE = 20  # a FaceID adapter's face embedding width (insightface's: 512)


def adapter_tensors(unet, full: bool = False, seed: int = 7, kind: str | None = None) -> dict:
    """An IP-Adapter for ``unet``, a key/value pair per cross-attention: plain (4 image
    tokens of CLIP's image_embeds), ``full`` (a token per CLIP hidden state), or ``kind``
    "plus", "faceid", "faceid-plus" (:mod:`mobius_diffusion.testing._ip_adapter`; the FaceID
    ones with a LoRA of every attention, as their checkpoints hold)."""
    rng = np.random.default_rng(seed)
    cross = unet.config.cross_attention_dim
    norm = "image_proj.proj.3" if full else "image_proj.norm"
    shapes = {f"{norm}.weight": (cross,), f"{norm}.bias": (cross,)}
    if full:
        shapes["image_proj.proj.0.weight"] = (VISION_WIDTH, VISION_WIDTH)
        shapes["image_proj.proj.0.bias"] = (VISION_WIDTH,)
        shapes["image_proj.proj.2.weight"] = (cross, VISION_WIDTH)
        shapes["image_proj.proj.2.bias"] = (cross,)
    else:
        shapes["image_proj.proj.weight"] = (4 * cross, IMAGE_EMBED)
        shapes["image_proj.proj.bias"] = (4 * cross,)
    projection = {}
    if kind is not None:
        from mobius_diffusion.testing._ip_adapter import random_image_proj

        width = FACE if kind == "faceid" else VISION_WIDTH
        projection = random_image_proj(kind, width, cross, seed + 1, id_embed=FACE)
        shapes = {}
    widths = [m.to_q.out_features for n, m in unet.named_modules() if n.endswith("attn2")]
    for k, width in enumerate(widths):  # diffusers' processor order; odd ids, as the original
        for name in ("to_k_ip", "to_v_ip"):
            shapes[f"ip_adapter.{2 * k + 1}.{name}.weight"] = (width, cross)
    if kind in ("faceid", "faceid-plus"):  # FaceID's LoRA of every attention, rank 2
        for key_id, processor in enumerate(unet.attn_processors):
            attn = unet.get_submodule(processor.removesuffix(".processor"))
            for proj, layer in zip(
                ("to_q", "to_k", "to_v", "to_out"), _projections(attn), strict=True
            ):
                shapes[f"ip_adapter.{key_id}.{proj}_lora.down.weight"] = (2, layer.in_features)
                shapes[f"ip_adapter.{key_id}.{proj}_lora.up.weight"] = (layer.out_features, 2)
    tensors = {n: 0.3 * rng.standard_normal(s) for n, s in shapes.items()}
    if kind is None:
        tensors[f"{norm}.weight"] += 1.0
    return {n: t.astype(np.float32) for n, t in tensors.items()} | projection


def _projections(attn) -> tuple:
    return attn.to_q, attn.to_k, attn.to_v, attn.to_out[0]


def make_sd_ip_adapter_pipeline(directory: Path, kind: str | None = None):
    """``(pipeline, adapter file)``: a ``StableDiffusionPipeline`` saved into ``directory``
    with its image encoder, then given the adapter file written beside it (plain, or the
    ``kind`` of :func:`adapter_tensors`)."""
    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from safetensors.numpy import save_file

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = _clip_text_encoder(len(tokenizer), CROSS)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        cross_attention_dim=CROSS,
        attention_head_dim=2,
        norm_num_groups=4,
    )
    vae = _tiny_vae(sample_size=16, scaling_factor=0.5)
    image_encoder = _image_encoder()
    _perturbed(text_encoder, unet, vae, image_encoder)
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=EulerDiscreteScheduler(
            beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1
        ),
        safety_checker=None,
        feature_extractor=_feature_extractor(),
        image_encoder=image_encoder,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    adapter = directory.parent / ADAPTER
    save_file(adapter_tensors(unet, kind=kind), adapter)
    pipe.load_ip_adapter(str(directory.parent), subfolder="", weight_name=ADAPTER)
    return pipe, adapter


def _feature_extractor():
    from transformers import CLIPImageProcessor

    return CLIPImageProcessor(
        size={"shortest_edge": CLIP_SIZE}, crop_size={"height": CLIP_SIZE, "width": CLIP_SIZE}
    )


def make_sdxl_ip_adapter_pipeline(directory: Path, kind: str | None = None):
    """``(pipeline, adapter file)``: the tiny SDXL pipeline of :func:`make_sdxl_pipeline` saved
    with an image encoder, and an IP-Adapter Full (CLIP's hidden states to tokens; or the
    ``kind`` of :func:`adapter_tensors`) beside it."""
    import torch
    from safetensors.numpy import save_file

    pipe = make_sdxl_pipeline(directory)
    torch.manual_seed(1)
    image_encoder = _image_encoder()
    _perturbed(image_encoder)
    pipe.register_modules(image_encoder=image_encoder, feature_extractor=_feature_extractor())
    pipe.save_pretrained(directory, safe_serialization=True)
    adapter = directory.parent / ADAPTER
    save_file(adapter_tensors(pipe.unet, full=kind is None, kind=kind), adapter)
    pipe.load_ip_adapter(str(directory.parent), subfolder="", weight_name=ADAPTER)
    return pipe, adapter
