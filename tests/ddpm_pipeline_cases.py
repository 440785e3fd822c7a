"""A tiny random ``DDPMPipeline``: UNet2DModel in pixel space, DDPM's scheduler; every
parameter perturbed, saved with ``save_pretrained``, no hub."""

from __future__ import annotations

from pathlib import Path

from mobius.testing import perturb_parameters

#: The DDPM UNet's sample_size: (height, width) in pixels.
DDPM_SIZE = (8, 12)


def make_ddpm_pipeline(directory: Path):
    """google/ddpm-cat-256's layout in small (a plain block, then attention blocks), DDPM's
    default scheduler (1000 linear betas, fixed small variance, clipped samples)."""
    import torch
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=DDPM_SIZE,
        in_channels=3,
        out_channels=3,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        attention_head_dim=None,
        norm_num_groups=4,
        norm_eps=1e-6,
        downsample_padding=0,
    )
    perturb_parameters(unet, 0)
    unet.eval()
    pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000))
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
