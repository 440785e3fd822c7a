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
- ``DDPMPipeline``: :class:`DDPMRunner` (unconditional: the empty prompt, a pixel-space
  UNet2DModel, the scheduler's steps, no VAE);
- ``StableDiffusionImg2ImgPipeline``, ``StableDiffusionInpaintPipeline``,
  ``StableDiffusionXLImg2ImgPipeline``, ``StableDiffusionXLInpaintPipeline``: the
  runners of :mod:`mobius_diffusion.pipelines.sd_img2img` (an input image encoded by
  ``vae/encoder/model``, ``strength``, the inpainting mask);
- ``LatentConsistencyModelPipeline``: :class:`LatentConsistencyModelRunner` (the
  guidance scale as the UNet's ``timestep_cond``, LCM's few-step scheduler);
- ``StableDiffusionPipeline`` / ``StableDiffusionXLPipeline`` built with ``--ip-adapter``
  (an ``ip_adapter/`` folder): :mod:`~mobius_diffusion.pipelines.ip_adapter` (an image
  prompt's CLIP embedding, projected to tokens each cross-attention also attends to);
- ``StableDiffusion(XL)ControlNetPipeline`` / ``StableDiffusion(XL)AdapterPipeline``:
  :mod:`~mobius_diffusion.pipelines.controlnet` / :mod:`~mobius_diffusion.pipelines.adapter`
  (a control image's ControlNet residuals or T2I-Adapter features added in the UNet);
- ``Lumina2Pipeline``: :class:`Lumina2Runner` (Gemma 2's ``hidden_states[-2]`` behind
  a system prompt, CFG with renormalization and truncation, flow matching);
- ``CogView4Pipeline``: :class:`CogView4Runner` (GLM-4's ``hidden_states[-2]``, size
  conditioning, flow matching shifted by the image size);
- ``CogView3PlusPipeline``: :class:`CogView3PlusRunner` (unmasked T5 states, zeros for the
  unconditional rows without a negative prompt, size conditioning, CogVideoX's DDIM);
- ``Flux2KleinPipeline``: :class:`Flux2KleinRunner` (Qwen3's layers 9, 18 and 27 side by
  side, 4-axis positions, CFG on the empty prompt, latents de-normalised by the VAE's
  batch-norm statistics);
- ``Flux2Pipeline``: :class:`Flux2Runner` (FLUX.2 dev: Mistral 3's layers 10, 20 and 30
  behind a system turn, Klein's steps with the guidance embedding instead of CFG);
- ``ChromaPipeline``: :class:`ChromaRunner` (Flux's latents and shift, T5 alone with
  one padding token unmasked, CFG with a negative prompt);
- ``AuraFlowPipeline``: :class:`AuraFlowRunner` (masked UMT5 states, CFG, flow matching);
- ``WanPipeline``: :class:`WanRunner` (text to video: masked UMT5 states, the 3-D
  transformer, the causal video VAE; frames ``[batch, frames, H, W, 3]``; Wan 2.2 TI2V's
  per-token timesteps, from text or from an image kept as the first latent frame).
- ``WanImageToVideoPipeline``: :class:`WanImageToVideoRunner` (an image to video: its VAE
  latents and a first-frame mask beside the noise, Wan 2.1's CLIP image states, Wan 2.2's
  two experts split at ``boundary_ratio``; FLF2V's last frame too).
- ``SkyReelsV2Pipeline``: :class:`SkyReelsV2Runner` (text to video: Wan's steps around the
  SkyReels-V2 transformer, SkyReels' defaults).
- ``CogVideoXPipeline``: :class:`CogVideoXRunner` (text to video, CogVideoX 1.0 and 1.5:
  T5 states, the 3-D transformer with numpy rotary tables, CogVideoX's DDIM/DPM samplers).
- ``KandinskyV22CombinedPipeline``: :class:`KandinskyV22Runner` (a prior from CLIP text to a
  CLIP image embedding, UnCLIP steps; the UNet on that embedding, DDPM steps; MoVQ).
- ``Kandinsky3Pipeline``: :class:`Kandinsky3Runner` (masked T5 states cut to the longest
  prompt, the Kandinsky 3 UNet with CFG against zeros or a negative prompt, DDPM; MoVQ).
- ``LTXPipeline``: :class:`LTXRunner` (text to video: T5 states with their mask in the
  transformer, packed latent tokens with 3-D rotary positions, flow matching shifted by the
  video's size, latents de-normalised for the video VAE and its decode timestep).
- ``HunyuanVideoPipeline``: :class:`HunyuanVideoRunner` (text to video: Llama's
  ``hidden_states[-3]`` behind a prompt template, CLIP's pooled text, embedded guidance,
  flow matching, the causal VAE decoded in overlapping frame tiles).
- ``HiDreamImagePipeline``: :class:`HiDreamImageRunner` (two CLIP pooled texts, T5's and
  every Llama layer's states, the mixture-of-experts transformer, CFG, UniPC or flow matching).
- ``QwenImagePipeline``: :class:`QwenImageRunner` (Qwen2.5-VL states behind a chat
  template, packed latents, true CFG with the norm rescale, the causal VAE on one frame).
- ``QwenImageEditPipeline``: :class:`QwenImageEditRunner` (an image edit: the image through
  Qwen2.5-VL's vision tower beside the instruction, its latents beside the noise's).
- ``StableCascadeCombinedPipeline``: :class:`StableCascadeRunner` (the prior's image
  embeddings under CLIP's last layer and pooled text, the decoder's VQGAN latents under
  them, Würstchen's DDPM steps, the Paella VQGAN).
- ``StableVideoDiffusionPipeline``: :class:`StableVideoDiffusionRunner` (an image to video:
  its CLIP image embedding and VAE latents, the spatio-temporal UNet, guidance ramped over
  the frames, Euler with EDM-style v-prediction, the temporal VAE decoder in chunks).
- ``AnimateDiffPipeline``: :class:`AnimateDiffRunner` (text to video: SD's CLIP states and
  VAE, frame by frame, the UNet with motion modules over the frames).
- ``ZImagePipeline``: :class:`ZImageRunner` (Qwen3's ``hidden_states[-2]`` behind the chat
  template, each caption's real tokens, CFG with truncation and normalisation, flow matching).
- ``MochiPipeline``: :class:`MochiRunner` (text to video: masked T5 states and their mask in
  the asymmetric transformer, CFG, flow matching over linear-quadratic sigmas, the causal
  VAE after the latents' mean and std).

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
from mobius_diffusion.pipelines.animatediff import AnimateDiffRunner
from mobius_diffusion.pipelines.aura_flow import AuraFlowRunner
from mobius_diffusion.pipelines.base import PipelineRunner, read_json
from mobius_diffusion.pipelines.chroma import ChromaRunner
from mobius_diffusion.pipelines.cogvideox import CogVideoXRunner
from mobius_diffusion.pipelines.cogview3plus import CogView3PlusRunner
from mobius_diffusion.pipelines.cogview4 import CogView4Runner
from mobius_diffusion.pipelines.controlnet import (
    StableDiffusionControlNetRunner,
    StableDiffusionXLControlNetRunner,
)
from mobius_diffusion.pipelines.ddpm import DDPMRunner
from mobius_diffusion.pipelines.dit import DiTRunner
from mobius_diffusion.pipelines.flux import (
    FluxRunner,
    calculate_shift,
    latent_image_ids,
    pack_latents,
    unpack_latents,
)
from mobius_diffusion.pipelines.flux2 import Flux2KleinRunner, Flux2Runner
from mobius_diffusion.pipelines.flux_image import (
    FluxFillRunner,
    FluxImg2ImgRunner,
    FluxInpaintRunner,
    FluxKontextRunner,
)
from mobius_diffusion.pipelines.hidream import HiDreamImageRunner
from mobius_diffusion.pipelines.hunyuan_video import HunyuanVideoRunner
from mobius_diffusion.pipelines.ip_adapter import (
    IP_ADAPTER_COMPONENT,
    StableDiffusionIPAdapterRunner,
    StableDiffusionXLIPAdapterRunner,
)
from mobius_diffusion.pipelines.kandinsky import KandinskyV22Runner
from mobius_diffusion.pipelines.kandinsky3 import Kandinsky3Runner
from mobius_diffusion.pipelines.lcm import LatentConsistencyModelRunner
from mobius_diffusion.pipelines.ltx import LTXRunner
from mobius_diffusion.pipelines.lumina2 import Lumina2Runner
from mobius_diffusion.pipelines.mochi import MochiRunner
from mobius_diffusion.pipelines.pixart import PixArtAlphaRunner, PixArtSigmaRunner
from mobius_diffusion.pipelines.qwen_image import QwenImageRunner
from mobius_diffusion.pipelines.qwen_image_edit import QwenImageEditRunner
from mobius_diffusion.pipelines.sana import SanaRunner
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner
from mobius_diffusion.pipelines.sd3 import StableDiffusion3Runner
from mobius_diffusion.pipelines.sd_img2img import (
    StableDiffusionImg2ImgRunner,
    StableDiffusionInpaintRunner,
    StableDiffusionXLImg2ImgRunner,
    StableDiffusionXLInpaintRunner,
)
from mobius_diffusion.pipelines.skyreels_v2 import SkyReelsV2Runner
from mobius_diffusion.pipelines.stable_cascade import StableCascadeRunner
from mobius_diffusion.pipelines.stable_video_diffusion import StableVideoDiffusionRunner
from mobius_diffusion.pipelines.wan import WanRunner
from mobius_diffusion.pipelines.wan_i2v import WanImageToVideoRunner
from mobius_diffusion.pipelines.z_image import ZImageRunner

__all__ = [
    "RUNNERS",
    "AnimateDiffRunner",
    "CogVideoXRunner",
    "AuraFlowRunner",
    "ChromaRunner",
    "CogView3PlusRunner",
    "CogView4Runner",
    "DDPMRunner",
    "DiTRunner",
    "Flux2KleinRunner",
    "Flux2Runner",
    "FluxFillRunner",
    "FluxImg2ImgRunner",
    "FluxInpaintRunner",
    "FluxKontextRunner",
    "FluxRunner",
    "KandinskyV22Runner",
    "Kandinsky3Runner",
    "HiDreamImageRunner",
    "HunyuanVideoRunner",
    "LatentConsistencyModelRunner",
    "LTXRunner",
    "Lumina2Runner",
    "MochiRunner",
    "PipelineRunner",
    "PixArtAlphaRunner",
    "PixArtSigmaRunner",
    "QwenImageEditRunner",
    "QwenImageRunner",
    "SanaRunner",
    "StableCascadeRunner",
    "StableDiffusion3Runner",
    "StableDiffusionAdapterRunner",
    "StableDiffusionControlNetRunner",
    "StableDiffusionImg2ImgRunner",
    "StableDiffusionInpaintRunner",
    "StableDiffusionIPAdapterRunner",
    "StableDiffusionRunner",
    "StableDiffusionXLImg2ImgRunner",
    "StableDiffusionXLInpaintRunner",
    "StableDiffusionXLIPAdapterRunner",
    "StableDiffusionXLAdapterRunner",
    "StableDiffusionXLControlNetRunner",
    "StableDiffusionXLRunner",
    "StableVideoDiffusionRunner",
    "calculate_shift",
    "is_image_package",
    "latent_image_ids",
    "open_pipeline",
    "pack_latents",
    "to_pil",
    "unpack_latents",
    "WanRunner",
    "WanImageToVideoRunner",
    "SkyReelsV2Runner",
    "ZImageRunner",
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
    "Flux2Pipeline": Flux2Runner,
    "Flux2KleinPipeline": Flux2KleinRunner,
    "StableDiffusion3Pipeline": StableDiffusion3Runner,
    "PixArtAlphaPipeline": PixArtAlphaRunner,
    "PixArtSigmaPipeline": PixArtSigmaRunner,
    "DiTPipeline": DiTRunner,
    "DDPMPipeline": DDPMRunner,
    "StableDiffusionImg2ImgPipeline": StableDiffusionImg2ImgRunner,
    "StableDiffusionInpaintPipeline": StableDiffusionInpaintRunner,
    "StableDiffusionXLImg2ImgPipeline": StableDiffusionXLImg2ImgRunner,
    "StableDiffusionXLInpaintPipeline": StableDiffusionXLInpaintRunner,
    "SanaPipeline": SanaRunner,
    "WanPipeline": WanRunner,
    "WanImageToVideoPipeline": WanImageToVideoRunner,
    "SkyReelsV2Pipeline": SkyReelsV2Runner,
    "CogVideoXPipeline": CogVideoXRunner,
    "HunyuanVideoPipeline": HunyuanVideoRunner,
    "MochiPipeline": MochiRunner,
    "LTXPipeline": LTXRunner,
    "QwenImagePipeline": QwenImageRunner,
    "QwenImageEditPipeline": QwenImageEditRunner,
    "Lumina2Pipeline": Lumina2Runner,
    "CogView4Pipeline": CogView4Runner,
    "CogView3PlusPipeline": CogView3PlusRunner,
    "ChromaPipeline": ChromaRunner,
    "HiDreamImagePipeline": HiDreamImageRunner,
    "AuraFlowPipeline": AuraFlowRunner,
    "KandinskyV22CombinedPipeline": KandinskyV22Runner,
    "Kandinsky3Pipeline": Kandinsky3Runner,
    "StableCascadeCombinedPipeline": StableCascadeRunner,
    "StableVideoDiffusionPipeline": StableVideoDiffusionRunner,
    "AnimateDiffPipeline": AnimateDiffRunner,
    "ZImagePipeline": ZImageRunner,
}

#: The runners of packages built with ``--ip-adapter`` (an ``ip_adapter/`` folder), by class.
IP_ADAPTER_RUNNERS: dict[str, type[PipelineRunner]] = {
    "StableDiffusionPipeline": StableDiffusionIPAdapterRunner,
    "StableDiffusionXLPipeline": StableDiffusionXLIPAdapterRunner,
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
    if (package / IP_ADAPTER_COMPONENT).is_dir():  # built with --ip-adapter
        if name not in IP_ADAPTER_RUNNERS:
            raise ConfigError(
                f"mobius runs an IP-Adapter in {', '.join(sorted(IP_ADAPTER_RUNNERS))} "
                f"packages; {package} is a {name}"
            )
        return IP_ADAPTER_RUNNERS[name](package, **options)
    return RUNNERS[name](package, **options)


def to_pil(images: np.ndarray) -> list:
    """PIL images from ``[batch, H, W, 3]`` floats in [0, 1] (rounded as diffusers rounds)."""
    from PIL import Image

    return [Image.fromarray((image * 255).round().astype(np.uint8)) for image in images]
