"""A tiny random Stable Video Diffusion pipeline for the end-to-end test: every parameter
perturbed, no hub; saved as the hub holds stabilityai/stable-video-diffusion-img2vid-xt."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed

#: scheduler/scheduler_config.json of stabilityai/stable-video-diffusion-img2vid-xt (its
#: EulerDiscreteScheduler fields that differ from the defaults).
HUB_SCHEDULER = dict(
    beta_start=0.00085,
    beta_end=0.012,
    beta_schedule="scaled_linear",
    interpolation_type="linear",
    prediction_type="v_prediction",
    sigma_max=700.0,
    sigma_min=0.002,
    steps_offset=1,
    timestep_spacing="leading",
    timestep_type="continuous",
    use_karras_sigmas=True,
)
#: The feature extractor's statistics: not CLIP's defaults, so reading them is checked.
IMAGE_MEAN, IMAGE_STD = [0.5, 0.4, 0.45], [0.25, 0.3, 0.28]
FRAMES = 3


def make_svd_pipeline(directory: Path):
    """A tiny ``StableVideoDiffusionPipeline`` saved into ``directory``: a 2-layer CLIP vision
    tower (224 pixels, the pipeline's fixed size, in 32-pixel patches) with a 16-wide
    projection, a two-level spatio-temporal UNet of 3 frames, the temporal-decoder VAE (32
    and 64 wide: diffusers fixes 32 GroupNorm groups) and the hub's Euler scheduler."""
    import torch
    from diffusers import (
        AutoencoderKLTemporalDecoder,
        EulerDiscreteScheduler,
        StableVideoDiffusionPipeline,
        UNetSpatioTemporalConditionModel,
    )
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    torch.manual_seed(0)
    image_encoder = CLIPVisionModelWithProjection(
        CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=224,
            patch_size=32,
            projection_dim=16,
        )
    )
    unet = UNetSpatioTemporalConditionModel(
        sample_size=8,
        in_channels=8,
        out_channels=4,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        block_out_channels=(32, 64),
        layers_per_block=1,
        cross_attention_dim=16,
        num_attention_heads=2,
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=3 * 4,  # fps, motion bucket, noise augmentation
        num_frames=FRAMES,
    )
    vae = AutoencoderKLTemporalDecoder(
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        block_out_channels=(32, 64),
        layers_per_block=2,
        latent_channels=4,
        scaling_factor=0.18215,
    )
    _perturbed(image_encoder, unet, vae)
    pipe = StableVideoDiffusionPipeline(
        vae=vae,
        image_encoder=image_encoder,
        unet=unet,
        scheduler=EulerDiscreteScheduler(**HUB_SCHEDULER),
        feature_extractor=CLIPImageProcessor(
            crop_size=224, size=224, image_mean=IMAGE_MEAN, image_std=IMAGE_STD
        ),
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
