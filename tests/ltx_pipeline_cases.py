"""A tiny random LTX-Video pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_ltx_pipeline` saves a diffusers ``LTXPipeline``
(float32, eval) with ``save_pretrained`` and returns it. It is laid out as the hub's
LTX-Video 0.9.5 is: a ``T5EncoderModel`` text encoder with a word-level T5-style tokenizer,
``LTXVideoTransformer3DModel`` (1 x 1 patches), an ``AutoencoderKLLTXVideo`` whose encoder
folds space and time with 0.9.5's down blocks and whose decoder is conditioned on the decode
timestep and injects noise (0.9.1+), its compression ratios written in its config (diffusers
would derive other ones from the encoder's scaling flags), and the hub's flow-matching
scheduler (dynamic shifting, ``shift_terminal`` 0.1).
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, tiny_t5, tiny_word_tokenizer

T5_WIDTH = 16
#: The VAE's factors: 8 pixels (2 x 2 patches, then two doublings) and 4 frames (two doublings).
SPATIAL, TEMPORAL = 8, 4
#: Fields of Lightricks/LTX-Video's scheduler/scheduler_config.json that differ from the defaults.
HUB_SCHEDULER = dict(
    use_dynamic_shifting=True,
    base_shift=0.95,
    max_shift=2.05,
    base_image_seq_len=1024,
    max_image_seq_len=4096,
    shift_terminal=0.1,
)


def tiny_ltx_vae():
    """An ``AutoencoderKLLTXVideo`` of 4 latent channels with 0.9.5's encoder and 0.9.1+'s decoder."""
    import torch
    from diffusers import AutoencoderKLLTXVideo

    vae = AutoencoderKLLTXVideo(
        latent_channels=4,
        block_out_channels=(8, 16, 16, 32),
        down_block_types=("LTXVideo095DownBlock3D",) * 3,
        layers_per_block=(1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, True),
        downsample_type=("spatial", "temporal", "spatiotemporal"),
        decoder_block_out_channels=(8, 16),
        decoder_layers_per_block=(1, 1, 1),
        decoder_spatio_temporal_scaling=(True, True),
        decoder_inject_noise=(False, True, True),
        upsample_residual=(True, True),
        upsample_factor=(2, 2),
        timestep_conditioning=True,
        patch_size=2,
        resnet_norm_eps=1e-5,
        spatial_compression_ratio=SPATIAL,
        temporal_compression_ratio=TEMPORAL,
    )
    with torch.no_grad():  # statistics far from (0, 1), so that de-normalising matters
        vae.latents_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.05]))
        vae.latents_std.copy_(torch.tensor([1.5, 0.8, 2.0, 1.2]))
    return vae


def make_ltx_pipeline(directory: Path):
    """A tiny ``LTXPipeline`` (T5 16 wide, a 2-layer transformer 16 wide) saved into ``directory``."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, LTXPipeline, LTXVideoTransformer3DModel

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), T5_WIDTH)
    transformer = LTXVideoTransformer3DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=8,
        cross_attention_dim=16,
        num_layers=2,
        caption_channels=T5_WIDTH,
    )
    vae = tiny_ltx_vae()
    _perturbed(text_encoder, transformer, vae)
    pipe = LTXPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
