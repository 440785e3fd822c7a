"""A tiny random ``CogView3PlusPipeline``, laid out as THUDM/CogView3-Plus-3B holds it.

A ``T5EncoderModel`` and a T5-style tokenizer, ``CogView3PlusTransformer2DModel``, an
``AutoencoderKL`` and a CogVideoXDDIMScheduler (v-prediction, zero terminal SNR,
trailing timesteps; an SNR shift of 4, not the default 3); every parameter perturbed.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, _tiny_vae, tiny_t5, tiny_word_tokenizer

MAX_SEQUENCE_LENGTH = 10  # the prompt's tokens and pads (unmasked, as diffusers)

#: The scheduler's fields that differ from CogVideoXDDIMScheduler's defaults.
SCHEDULER = dict(
    clip_sample=False,
    prediction_type="v_prediction",
    rescale_betas_zero_snr=True,
    timestep_spacing="trailing",
    snr_shift_scale=4.0,
)


def make_cogview3plus_pipeline(directory: Path):
    """A tiny ``CogView3PlusPipeline`` (T5 16 wide, a 2-layer transformer on 4 latent channels,
    a two-level VAE) saved into ``directory``."""
    import torch
    from diffusers import (
        CogVideoXDDIMScheduler,
        CogView3PlusPipeline,
        CogView3PlusTransformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), 16)
    transformer = CogView3PlusTransformer2DModel(
        patch_size=2,
        in_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        out_channels=4,
        text_embed_dim=16,
        time_embed_dim=12,
        condition_dim=6,
        pos_embed_max_size=16,
        sample_size=8,
    )
    vae = _tiny_vae(scaling_factor=0.7)
    _perturbed(text_encoder, transformer, vae)
    pipe = CogView3PlusPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=CogVideoXDDIMScheduler(**SCHEDULER),
    )
    pipe.save_pretrained(directory)
    return pipe
