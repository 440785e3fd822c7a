"""A tiny random Stable Cascade (``StableCascadeCombinedPipeline``) for the end-to-end test:
every parameter perturbed, no hub."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _clip_text_encoder, _perturbed, tiny_clip_tokenizer

RES, TIMESTEP, ATTN = "SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"
#: The prior's latent channels (its image embeddings: the decoder's effnet input) and the
#: pooled text width (the CLIP projection) both UNets map.
EMBEDDING_CHANNELS, POOLED = 4, 12


def _unets():
    """Stage C (text states, pooled text and image CLIP tokens; ``switch_level`` as the hub's)
    and stage B (patches of 2, effnet and pixel mappers, a level without attention)."""
    from diffusers import StableCascadeUNet

    shared = dict(
        timestep_ratio_embedding_dim=64,
        conditioning_dim=16,
        down_num_layers_per_block=[1, 1],
        up_num_layers_per_block=[1, 1],
        down_blocks_repeat_mappers=[1, 1],
        clip_text_pooled_in_channels=POOLED,
        clip_seq=4,
        dropout=[0.0, 0.0],
    )
    prior = StableCascadeUNet(
        in_channels=EMBEDDING_CHANNELS,
        out_channels=EMBEDDING_CHANNELS,
        patch_size=1,
        block_out_channels=[16, 16],
        num_attention_heads=[2, 2],
        up_blocks_repeat_mappers=[1, 1],
        block_types_per_layer=[[RES, TIMESTEP, ATTN], [RES, TIMESTEP, ATTN]],
        clip_text_in_channels=16,
        clip_image_in_channels=10,
        switch_level=[False],
        **shared,
    )
    decoder = StableCascadeUNet(
        in_channels=4,
        out_channels=4,
        patch_size=2,
        block_out_channels=[8, 16],
        num_attention_heads=[-1, 2],
        up_blocks_repeat_mappers=[2, 1],
        block_types_per_layer=[[RES, TIMESTEP], [RES, TIMESTEP, ATTN]],
        effnet_in_channels=EMBEDDING_CHANNELS,
        pixel_mapper_in_channels=3,
        timestep_conditioning_type=["sca"],
        **shared,
    )
    return prior, decoder


def make_stable_cascade_pipeline(directory: Path):
    """A tiny ``StableCascadeCombinedPipeline`` saved into ``directory``: one CLIP text encoder
    with a projection (the prior's and the decoder's, as the hub's are alike), a CLIP vision
    encoder with a projection (image prompts), a two-level Paella VQGAN."""
    import torch
    from diffusers import DDPMWuerstchenScheduler, StableCascadeCombinedPipeline
    from diffusers.pipelines.deprecated.wuerstchen.modeling_paella_vq_model import PaellaVQModel
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        CLIPVisionModelWithProjection,
    )

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = _clip_text_encoder(len(tokenizer), 16, projection_dim=POOLED)
    prior, decoder = _unets()
    vqgan = PaellaVQModel(
        levels=2, bottleneck_blocks=1, embed_dim=8, latent_channels=4, num_vq_embeddings=16
    )
    vision = CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=16,
        projection_dim=10,
    )
    image_encoder = CLIPVisionModelWithProjection(vision)
    _perturbed(text_encoder, prior, decoder, vqgan, image_encoder)
    pipe = StableCascadeCombinedPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        decoder=decoder,
        scheduler=DDPMWuerstchenScheduler(),
        vqgan=vqgan,
        prior_prior=prior,
        prior_text_encoder=text_encoder,
        prior_tokenizer=tokenizer,
        prior_scheduler=DDPMWuerstchenScheduler(),
        prior_feature_extractor=CLIPImageProcessor(size=32, crop_size=32),
        prior_image_encoder=image_encoder,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
