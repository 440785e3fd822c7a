"""Tiny random ``WanImageToVideoPipeline``s, saved for a build: Wan 2.1 (a CLIP vision image
encoder, a transformer that attends to its states) and Wan 2.2 A14B (no image encoder, two
experts split at ``boundary_ratio``), each as the hub lays it out, every parameter perturbed."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, tiny_word_tokenizer

#: The Wan I2V hubs' UniPC scheduler (the fields that differ from its defaults).
HUB_SCHEDULER = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
CLIP_SIZE = 16  # the CLIP tower's image: 2x2 patches of 8


def _components():
    """``(tokenizer, UMT5 16 wide, a VAE of 4 latent channels halving time and space twice)``."""
    from diffusers import AutoencoderKLWan
    from transformers import UMT5Config, UMT5EncoderModel

    tokenizer = tiny_word_tokenizer()
    text_encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(tokenizer),
            d_model=16,
            d_kv=8,
            d_ff=24,
            num_layers=2,
            num_heads=2,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
            feed_forward_proj="gated-gelu",
        )
    )
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[True, True],
        latents_mean=[0.1, -0.2, 0.3, 0.05],
        latents_std=[1.5, 0.8, 2.0, 1.2],
        scale_factor_spatial=4,  # the pipeline's mask takes the factor from the config
    )
    return tokenizer, text_encoder, vae


def _transformer(**image):
    """A 2-layer transformer over the 4 noisy, 4 mask and 4 image latent channels."""
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=12,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
        **image,
    )


def make_wan21_i2v_pipeline(directory: Path):
    """Wan 2.1 I2V: CLIP vision's ``hidden_states[-2]`` (16 wide) through the image embedder."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(0)
    tokenizer, text_encoder, vae = _components()
    image_encoder = CLIPVisionModel(
        CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=CLIP_SIZE,
            patch_size=8,
        )
    )
    transformer = _transformer(image_dim=16, added_kv_proj_dim=24)
    _perturbed(text_encoder, transformer, vae, image_encoder)
    pipe = WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=UniPCMultistepScheduler(**HUB_SCHEDULER),
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": CLIP_SIZE}, crop_size={"height": CLIP_SIZE, "width": CLIP_SIZE}
        ),
        image_encoder=image_encoder,
        transformer=transformer,
    )
    pipe.save_pretrained(directory)
    return pipe


def make_wan22_i2v_pipeline(directory: Path, boundary_ratio: float = 0.875):
    """Wan 2.2 A14B I2V: no image encoder; ``transformer`` at or above the boundary, ``transformer_2`` below."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline

    torch.manual_seed(1)
    tokenizer, text_encoder, vae = _components()
    transformer, transformer_2 = _transformer(), _transformer()
    _perturbed(text_encoder, transformer, vae, transformer_2)
    pipe = WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=UniPCMultistepScheduler(**HUB_SCHEDULER),
        transformer=transformer,
        transformer_2=transformer_2,
        boundary_ratio=boundary_ratio,
    )
    pipe.save_pretrained(directory)
    return pipe
