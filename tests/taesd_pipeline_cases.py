"""A tiny random Stable Diffusion pipeline whose VAE is swapped for TAESD
(``AutoencoderTiny``): every parameter perturbed, saved with ``save_pretrained``, no hub."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import make_sd_pipeline

from mobius.testing import perturb_parameters


def make_taesd_pipeline(directory: Path):
    """:func:`make_sd_pipeline`'s pipeline with TAESD as its VAE, as a user swaps it in
    (``pipe.vae = AutoencoderTiny(...)``, then ``save_pretrained``): two stages (the factor 2
    of the tiny SD VAE it replaces), four latent channels, ``scaling_factor`` 1.0."""
    from diffusers import AutoencoderTiny

    pipe = make_sd_pipeline(directory.parent / "sd")
    vae = AutoencoderTiny(
        encoder_block_out_channels=(8, 8),
        decoder_block_out_channels=(8, 8),
        num_encoder_blocks=(1, 2),
        num_decoder_blocks=(2, 1),
        latent_channels=4,
    )
    perturb_parameters(vae, 3)
    vae.eval()
    pipe.vae = vae
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
