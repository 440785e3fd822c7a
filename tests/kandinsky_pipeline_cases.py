"""A tiny random ``KandinskyV22CombinedPipeline``: every parameter perturbed, no hub.

The prior: a CLIP text encoder with a projection, the prior transformer over the
tokenizer's 12 tokens, a CLIP vision encoder (the negative image embedding of an all-zero
image) and Kandinsky's UnCLIP scheduler (x0 prediction clipped to 10). The decoder: the
Kandinsky 2.2 UNet (image embedding as context and added embedding, simple blocks, a
learned-variance output), DDPM as the hub's decoder has it, and a two-level MoVQ.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _clip_text_encoder, _perturbed, tiny_clip_tokenizer

#: The width shared by the text encoder, its projection, the prior and the image embedding.
WIDTH = 16


def make_kandinsky_pipeline(directory: Path):
    """The pipeline (float32, eval), saved with ``save_pretrained`` into ``directory``."""
    import torch
    from diffusers import (
        DDPMScheduler,
        KandinskyV22CombinedPipeline,
        PriorTransformer,
        UnCLIPScheduler,
        UNet2DConditionModel,
        VQModel,
    )
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = _clip_text_encoder(len(tokenizer), WIDTH, projection_dim=WIDTH)
    image_encoder = CLIPVisionModelWithProjection(
        CLIPVisionConfig(
            hidden_size=WIDTH,
            intermediate_size=2 * WIDTH,
            projection_dim=WIDTH,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=8,
            patch_size=4,
        )
    )
    prior = PriorTransformer(
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=2,
        embedding_dim=WIDTH,
        num_embeddings=tokenizer.model_max_length,
        additional_embeddings=4,
        norm_in_type="layer",
        time_embed_act_fn="gelu",
    )
    unet = UNet2DConditionModel(
        in_channels=4,
        out_channels=8,  # the noise and a learned variance, as Kandinsky's
        down_block_types=("ResnetDownsampleBlock2D", "SimpleCrossAttnDownBlock2D"),
        up_block_types=("SimpleCrossAttnUpBlock2D", "ResnetUpsampleBlock2D"),
        mid_block_type="UNetMidBlock2DSimpleCrossAttn",
        block_out_channels=(8, 16),
        layers_per_block=1,
        encoder_hid_dim=WIDTH,
        encoder_hid_dim_type="image_proj",
        addition_embed_type="image",
        cross_attention_dim=12,
        attention_head_dim=4,
        resnet_time_scale_shift="scale_shift",
        norm_num_groups=4,
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
    _perturbed(text_encoder, image_encoder, prior, unet, movq)
    pipe = KandinskyV22CombinedPipeline(
        unet=unet,
        scheduler=DDPMScheduler(
            beta_start=0.00085,
            beta_end=0.012,
            clip_sample=False,
            steps_offset=1,
            timestep_spacing="leading",
        ),
        movq=movq,
        prior_prior=prior,
        prior_image_encoder=image_encoder,
        prior_text_encoder=text_encoder,
        prior_tokenizer=tokenizer,
        prior_scheduler=UnCLIPScheduler(
            clip_sample=True, clip_sample_range=10.0, prediction_type="sample"
        ),
        prior_image_processor=CLIPImageProcessor(size=8, crop_size=8),
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
