"""Tiny random ControlNet and T2I-Adapter pipelines: the SD or SDXL pipeline of
:mod:`pipeline_cases` with a ControlNet (or an adapter) beside its UNet, every parameter
perturbed. The VAE halves the image: latents at size / 2."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import make_sd_pipeline, make_sdxl_pipeline

SD_COMPONENTS = ("vae", "text_encoder", "tokenizer", "unet", "scheduler")
#: The SD pipelines' arguments beyond their components (SDXL's take none of them).
SD_EXTRAS = dict(safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def _base(directory: Path, xl: bool) -> tuple[dict, dict]:
    """(the base pipeline's components, the extra arguments of its variants)."""
    if xl:
        pipe = make_sdxl_pipeline(directory.parent / "sdxl-base")
        names = (*SD_COMPONENTS, "text_encoder_2", "tokenizer_2")
        return {name: getattr(pipe, name) for name in names}, {}
    pipe = make_sd_pipeline(directory.parent / "sd-base")
    return {name: getattr(pipe, name) for name in SD_COMPONENTS}, SD_EXTRAS


def _saved(pipe, directory: Path):
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def _perturbed(model, seed: int):
    from mobius.testing import perturb_parameters

    perturb_parameters(model, seed)  # zero-initialised convs included
    return model.eval()


def make_controlnet_pipeline(directory: Path, xl: bool = False):
    """A ``StableDiffusion(XL)ControlNetPipeline`` saved into ``directory``: the UNet's down
    path as its ControlNet, the condition embedded by one stride-2 step (the VAE's halving)."""
    from diffusers import (
        ControlNetModel,
        StableDiffusionControlNetPipeline,
        StableDiffusionXLControlNetPipeline,
    )

    components, extras = _base(directory, xl)
    controlnet = ControlNetModel.from_unet(
        components["unet"], conditioning_embedding_out_channels=(4, 8)
    )
    cls = StableDiffusionXLControlNetPipeline if xl else StableDiffusionControlNetPipeline
    if xl:
        extras = dict(add_watermarker=False)
    return _saved(cls(**components, controlnet=_perturbed(controlnet, 7), **extras), directory)


def make_adapter_pipeline(directory: Path, xl: bool = False):
    """A ``StableDiffusion(XL)AdapterPipeline`` saved into ``directory``.

    SD: a ``full_adapter``, one feature per UNet down block (unshuffled by 2: the first
    at latent size). SDXL: a ``full_adapter_xl`` (unshuffled by 4: the first feature at
    the size after the UNet's first, plain block downsamples); its third feature, half
    the mid block's size, is dropped as diffusers drops it.
    """
    from diffusers import (
        StableDiffusionAdapterPipeline,
        StableDiffusionXLAdapterPipeline,
        T2IAdapter,
    )

    components, extras = _base(directory, xl)
    if xl:
        adapter = T2IAdapter(
            in_channels=3,
            channels=(8, 16, 16),
            num_res_blocks=1,
            downscale_factor=4,
            adapter_type="full_adapter_xl",
        )
    else:
        adapter = T2IAdapter(in_channels=3, channels=(8, 16), num_res_blocks=1, downscale_factor=2)
    cls = StableDiffusionXLAdapterPipeline if xl else StableDiffusionAdapterPipeline
    return _saved(cls(**components, adapter=_perturbed(adapter, 8), **extras), directory)
