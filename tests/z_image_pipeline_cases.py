"""A tiny random Z-Image pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_z_image_pipeline` saves a diffusers ``ZImagePipeline``
(float32, eval) with ``save_pretrained`` and returns it. The text encoder is a bare
``Qwen3Model`` (the class Z-Image-Turbo's ``model_index.json`` names) of three layers (the
pipeline reads ``hidden_states[-2]``), behind Flux.2 Klein's tiny Qwen3 tokenizer and chat
template; the VAE halves the image once and has Flux's kind of shift and scale.
"""

from __future__ import annotations

from pathlib import Path

from flux2_pipeline_cases import TEXT_WIDTH, tiny_qwen3_tokenizer
from lumina2_cogview4_pipeline_cases import _vae
from pipeline_cases import _perturbed

#: Tongyi-MAI/Z-Image-Turbo's scheduler/scheduler_config.json: the fields that differ from
#: FlowMatchEulerDiscreteScheduler's defaults.
HUB_SCHEDULER = dict(use_dynamic_shifting=False, shift=3.0)


def tiny_qwen3_model(vocab_size: int):
    """A bare three-layer Qwen3 (grouped KV heads, q/k norms) of width :data:`TEXT_WIDTH`."""
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=TEXT_WIDTH,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        pad_token_id=0,
    )
    return Qwen3Model._from_config(config, attn_implementation="eager")


def make_z_image_pipeline(directory: Path):
    """A tiny ``ZImagePipeline`` saved into ``directory``: a 1+2-layer transformer over
    4-channel latents, a two-level VAE with a shift factor, the hub's scheduler config."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel

    torch.manual_seed(0)
    tokenizer = tiny_qwen3_tokenizer()
    text_encoder = tiny_qwen3_model(len(tokenizer))
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,),
        all_f_patch_size=(1,),
        in_channels=4,
        dim=32,
        n_layers=2,
        n_refiner_layers=1,
        n_heads=2,
        n_kv_heads=2,
        cap_feat_dim=TEXT_WIDTH,
        axes_dims=[4, 6, 6],
        axes_lens=[256, 32, 32],
    )
    vae = _vae((8, 16), scaling_factor=0.36, shift_factor=0.12)
    _perturbed(text_encoder, transformer, vae)
    pipe = ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
