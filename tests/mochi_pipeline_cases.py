"""A tiny random Mochi text-to-video pipeline, saved as the hub lays out genmo/mochi-1-preview."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, tiny_t5, tiny_word_tokenizer


def make_mochi_pipeline(directory: Path, force_zeros_for_empty_prompt: bool = False):
    """A tiny ``MochiPipeline`` saved into ``directory``: T5 16 wide, a 2-layer transformer
    (video 16 wide, caption 12), and a VAE of 12 latent channels (the pipeline's fixed
    count) over the hub's (1, 2, 3) frames and (2, 2, 2) pixels of compression; the hub's
    scheduler, flow matching with ``invert_sigmas``."""
    import torch
    from diffusers import (
        AutoencoderKLMochi,
        FlowMatchEulerDiscreteScheduler,
        MochiPipeline,
        MochiTransformer3DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), 16)
    transformer = MochiTransformer3DModel(
        patch_size=2,
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=2,
        pooled_projection_dim=12,
        in_channels=12,
        text_embed_dim=16,
        time_embed_dim=16,
        max_sequence_length=10,
    )
    vae = AutoencoderKLMochi(
        encoder_block_out_channels=(32, 32, 32, 32),
        decoder_block_out_channels=(32, 32, 32, 32),
        latent_channels=12,
        layers_per_block=(1, 1, 1, 1, 1),
        latents_mean=[0.05 * (i - 6) for i in range(12)],
        latents_std=[0.8 + 0.05 * i for i in range(12)],
        scaling_factor=1.2,
    )
    _perturbed(text_encoder, transformer, vae)
    pipe = MochiPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(invert_sigmas=True),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        force_zeros_for_empty_prompt=force_zeros_for_empty_prompt,
    )
    pipe.save_pretrained(directory)
    return pipe
