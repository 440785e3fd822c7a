"""Run a built diffusion pipeline with ONNX Runtime and numpy: text (or a class) to image, no torch, no diffusers.

A package is what ``mobius build --model <pipeline>`` writes (see the README): one
folder per component (``unet/model.onnx`` or ``transformer/model.onnx``,
``vae/decoder/model.onnx``, ``text_encoder/model.onnx``, ``tokenizer/``,
``scheduler/``) and ``model_index.json``, whose ``_class_name`` picks the runner
(:data:`RUNNERS`; each family's in :mod:`mobius_diffusion.pipelines`):

- ``StableDiffusionPipeline``: :class:`StableDiffusionRunner` (CLIP text encoder,
  UNet with classifier-free guidance, VAE decoder);
- ``StableDiffusionXLPipeline``: :class:`StableDiffusionXLRunner` (two CLIP encoders'
  penultimate states, pooled text and size conditioning of the UNet);
- ``FluxPipeline``: :class:`FluxRunner` (CLIP pooled and T5 states, packed latents,
  flow-matching steps with the resolution-dependent shift, guidance embedding);
- ``FluxImg2ImgPipeline``, ``FluxInpaintPipeline``, ``FluxFillPipeline``,
  ``FluxKontextPipeline``: the runners of :mod:`mobius_diffusion.pipelines.flux_image`
  (an input image's packed latents: noised by ``strength``, blended under a mask, beside
  the mask in the Fill transformer's channels, or a Kontext context image's tokens);
- ``StableDiffusion3Pipeline``: :class:`StableDiffusion3Runner` (CLIP-L, CLIP-G and
  optional T5, the MMDiT transformer, flow-matching steps);
- ``PixArtAlphaPipeline`` / ``PixArtSigmaPipeline``: :class:`PixArtAlphaRunner` /
  :class:`PixArtSigmaRunner` (masked T5 states, size conditioning, learned sigma);
- ``SanaPipeline``: :class:`SanaRunner` (Gemma 2 states behind Sana's instruction,
  the linear-attention transformer with CFG, flow DPM-Solver++, the DC-AE decoder);
- ``DiTPipeline``: :class:`DiTRunner` (ImageNet class ids or names, the null class);
- ``StableDiffusionImg2ImgPipeline``, ``StableDiffusionInpaintPipeline``,
  ``StableDiffusionXLImg2ImgPipeline``, ``StableDiffusionXLInpaintPipeline``: the
  runners of :mod:`mobius_diffusion.pipelines.sd_img2img` (an input image encoded by
  ``vae/encoder/model``, ``strength``, the inpainting mask);
- ``LatentConsistencyModelPipeline``: :class:`LatentConsistencyModelRunner` (the
  guidance scale as the UNet's ``timestep_cond``, LCM's few-step scheduler);
- ``StableDiffusion(XL)ControlNetPipeline`` / ``StableDiffusion(XL)AdapterPipeline``:
  :mod:`~mobius_diffusion.pipelines.controlnet` / :mod:`~mobius_diffusion.pipelines.adapter`
  (a control image's ControlNet residuals or T2I-Adapter features added in the UNet);
- ``Lumina2Pipeline``: :class:`Lumina2Runner` (Gemma 2's ``hidden_states[-2]`` behind
  a system prompt, CFG with renormalization and truncation, flow matching);
- ``CogView4Pipeline``: :class:`CogView4Runner` (GLM-4's ``hidden_states[-2]``, size
  conditioning, flow matching shifted by the image size);
- ``ChromaPipeline``: :class:`ChromaRunner` (Flux's latents and shift, T5 alone with
  one padding token unmasked, CFG with a negative prompt);
- ``AuraFlowPipeline``: :class:`AuraFlowRunner` (masked UMT5 states, CFG, flow matching);
- ``WanPipeline``: :class:`WanRunner` (text to video: masked UMT5 states, the 3-D
  transformer, the causal video VAE; frames ``[batch, frames, H, W, 3]``).
- ``CogVideoXPipeline``: :class:`CogVideoXRunner` (text to video, CogVideoX 1.0 and 1.5:
  T5 states, the 3-D transformer with numpy rotary tables, CogVideoX's DDIM/DPM samplers).
- ``QwenImagePipeline``: :class:`QwenImageRunner` (Qwen2.5-VL states behind a chat
  template, packed latents, true CFG with the norm rescale, the causal VAE on one frame).

Each runner follows its diffusers pipeline step by step, with the scheduler of
``scheduler/scheduler_config.json`` ported to numpy (:mod:`mobius_diffusion.schedulers`),
so the same initial latents give the same image. Example::

    from mobius_diffusion.pipeline import open_pipeline, to_pil

    pipe = open_pipeline("sd-onnx/")
    images = pipe("a red bicycle", num_inference_steps=20, seed=0)  # [1, H, W, 3] in [0, 1]
    to_pil(images)[0].save("bicycle.png")

Needs ONNX Runtime and transformers' tokenizers (``pip install mobius-diffusion[run]``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mobius.errors import ConfigError, MobiusError
from mobius_diffusion.pipelines.adapter import (
    StableDiffusionAdapterRunner,
    StableDiffusionXLAdapterRunner,
)
from mobius_diffusion.pipelines.aura_flow import AuraFlowRunner
from mobius_diffusion.pipelines.base import PipelineRunner, read_json
from mobius_diffusion.pipelines.chroma import ChromaRunner
from mobius_diffusion.pipelines.cogvideox import CogVideoXRunner
from mobius_diffusion.pipelines.cogview4 import CogView4Runner
from mobius_diffusion.pipelines.controlnet import (
    StableDiffusionControlNetRunner,
    StableDiffusionXLControlNetRunner,
)
from mobius_diffusion.pipelines.dit import DiTRunner
from mobius_diffusion.pipelines.flux import (
    FluxRunner,
    calculate_shift,
    latent_image_ids,
    pack_latents,
    unpack_latents,
)
from mobius_diffusion.pipelines.flux_image import (
    FluxFillRunner,
    FluxImg2ImgRunner,
    FluxInpaintRunner,
    FluxKontextRunner,
)
from mobius_diffusion.pipelines.lcm import LatentConsistencyModelRunner
from mobius_diffusion.pipelines.lumina2 import Lumina2Runner
from mobius_diffusion.pipelines.pixart import PixArtAlphaRunner, PixArtSigmaRunner
from mobius_diffusion.pipelines.qwen_image import QwenImageRunner
from mobius_diffusion.pipelines.sana import SanaRunner
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner
from mobius_diffusion.pipelines.sd3 import StableDiffusion3Runner
from mobius_diffusion.pipelines.sd_img2img import (
    StableDiffusionImg2ImgRunner,
    StableDiffusionInpaintRunner,
    StableDiffusionXLImg2ImgRunner,
    StableDiffusionXLInpaintRunner,
)
from mobius_diffusion.pipelines.wan import WanRunner

__all__ = [
    "RUNNERS",
    "CogVideoXRunner",
    "AuraFlowRunner",
    "ChromaRunner",
    "CogView4Runner",
    "DiTRunner",
    "FluxFillRunner",
    "FluxImg2ImgRunner",
    "FluxInpaintRunner",
    "FluxKontextRunner",
    "FluxRunner",
    "LatentConsistencyModelRunner",
    "Lumina2Runner",
    "PipelineRunner",
    "PixArtAlphaRunner",
    "PixArtSigmaRunner",
    "QwenImageRunner",
    "SanaRunner",
    "StableDiffusion3Runner",
    "StableDiffusionAdapterRunner",
    "StableDiffusionControlNetRunner",
    "StableDiffusionImg2ImgRunner",
    "StableDiffusionInpaintRunner",
    "StableDiffusionRunner",
    "StableDiffusionXLImg2ImgRunner",
    "StableDiffusionXLInpaintRunner",
    "StableDiffusionXLAdapterRunner",
    "StableDiffusionXLControlNetRunner",
    "StableDiffusionXLRunner",
    "calculate_shift",
    "is_image_package",
    "latent_image_ids",
    "open_pipeline",
    "pack_latents",
    "to_pil",
    "unpack_latents",
    "WanRunner",
]

#: Runners by the diffusers pipeline class they stand for.
RUNNERS: dict[str, type[PipelineRunner]] = {
    "StableDiffusionPipeline": StableDiffusionRunner,
    "LatentConsistencyModelPipeline": LatentConsistencyModelRunner,
    "StableDiffusionXLPipeline": StableDiffusionXLRunner,
    "StableDiffusionControlNetPipeline": StableDiffusionControlNetRunner,
    "StableDiffusionXLControlNetPipeline": StableDiffusionXLControlNetRunner,
    "StableDiffusionAdapterPipeline": StableDiffusionAdapterRunner,
    "StableDiffusionXLAdapterPipeline": StableDiffusionXLAdapterRunner,
    "FluxPipeline": FluxRunner,
    "FluxImg2ImgPipeline": FluxImg2ImgRunner,
    "FluxInpaintPipeline": FluxInpaintRunner,
    "FluxFillPipeline": FluxFillRunner,
    "FluxKontextPipeline": FluxKontextRunner,
    "StableDiffusion3Pipeline": StableDiffusion3Runner,
    "PixArtAlphaPipeline": PixArtAlphaRunner,
    "PixArtSigmaPipeline": PixArtSigmaRunner,
    "DiTPipeline": DiTRunner,
    "StableDiffusionImg2ImgPipeline": StableDiffusionImg2ImgRunner,
    "StableDiffusionInpaintPipeline": StableDiffusionInpaintRunner,
    "StableDiffusionXLImg2ImgPipeline": StableDiffusionXLImg2ImgRunner,
    "StableDiffusionXLInpaintPipeline": StableDiffusionXLInpaintRunner,
    "SanaPipeline": SanaRunner,
    "WanPipeline": WanRunner,
    "CogVideoXPipeline": CogVideoXRunner,
    "QwenImagePipeline": QwenImageRunner,
    "Lumina2Pipeline": Lumina2Runner,
    "CogView4Pipeline": CogView4Runner,
    "ChromaPipeline": ChromaRunner,
    "AuraFlowPipeline": AuraFlowRunner,
}


def is_image_package(package_dir: str | os.PathLike) -> bool:
    """Whether a directory is a built pipeline package (it has ``model_index.json``)."""
    return (Path(package_dir) / "model_index.json").is_file()


def open_pipeline(package_dir: str | os.PathLike, **options) -> PipelineRunner:
    """The runner of a built pipeline package, by its ``model_index.json`` ``_class_name``.

    ``options``: ``threads`` (ONNX Runtime intra-op threads), ``providers``.

    Raises:
        ConfigError: a pipeline class or scheduler mobius does not run.
        MobiusError: not a pipeline package.
    """
    package = Path(package_dir)
    if not is_image_package(package):
        raise MobiusError(f"{package} has no model_index.json: not a built diffusion pipeline")
    name = read_json(package / "model_index.json").get("_class_name")
    if not isinstance(name, str) or name not in RUNNERS:
        raise ConfigError(
            f"mobius runs {', '.join(sorted(RUNNERS))} packages; {package} is a {name}"
        )
    return RUNNERS[name](package, **options)


def to_pil(images: np.ndarray) -> list:
    """PIL images from ``[batch, H, W, 3]`` floats in [0, 1] (rounded as diffusers rounds)."""
    from PIL import Image

    return [Image.fromarray((image * 255).round().astype(np.uint8)) for image in images]
