"""A tiny random ``Kandinsky3Pipeline``: every parameter perturbed, no hub.

T5 (a 2-layer encoder over a word tokenizer), a two-level Kandinsky 3 UNet (both up levels
attend, as diffusers' fixed attention tuple makes it for fewer than four levels), DDPM with
linear betas and the predicted sample clipped, and a two-level MoVQ (spatial norms).
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, tiny_t5, tiny_word_tokenizer

#: The T5 width, which the UNet projects (``encoder_hid_dim``).
T5_WIDTH = 16


def make_kandinsky3_pipeline(directory: Path):
    """The pipeline (float32, eval), saved with ``save_pretrained`` into ``directory``."""
    import torch
    from diffusers import DDPMScheduler, Kandinsky3Pipeline, Kandinsky3UNet, VQModel

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), T5_WIDTH)
    unet = Kandinsky3UNet(
        in_channels=4,
        time_embedding_dim=16,
        groups=4,
        attention_head_dim=8,
        layers_per_block=2,
        block_out_channels=(16, 24),
        cross_attention_dim=24,
        encoder_hid_dim=T5_WIDTH,
    )
    movq = VQModel(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "AttnDownEncoderBlock2D"),
        up_block_types=("AttnUpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(32, 64),
        layers_per_block=1,
        latent_channels=4,
        num_vq_embeddings=12,
        norm_num_groups=8,
        norm_type="spatial",
        vq_embed_dim=4,
    )
    _perturbed(text_encoder, unet, movq)
    scheduler = DDPMScheduler(
        beta_schedule="linear", beta_start=0.0001, beta_end=0.02, clip_sample=True
    )
    pipe = Kandinsky3Pipeline(
        tokenizer=tokenizer, text_encoder=text_encoder, unet=unet, scheduler=scheduler, movq=movq
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
