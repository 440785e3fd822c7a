"""Tiny random Wan image-to-video pipelines, saved for a build: Wan 2.1 (a CLIP vision image
encoder, a transformer that attends to its states), Wan 2.1 FLF2V (the same, with the first and
the last frame's states joined under ``pos_embed``), Wan 2.2 A14B (no image encoder, two experts
split at ``boundary_ratio``) and Wan 2.2 TI2V (``expand_timesteps``, the Wan 2.2 VAE), each as
the hub lays it out, every parameter perturbed."""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import PROMPT, _perturbed, tiny_word_tokenizer

#: The Wan I2V hubs' UniPC scheduler (the fields that differ from its defaults).
HUB_SCHEDULER = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
CLIP_SIZE = 16  # the CLIP tower's image: 2x2 patches of 8


def _components(**vae_options):
    """``(tokenizer, UMT5 16 wide, a VAE of 4 latent channels halving time and space twice)``;
    ``vae_options`` change the VAE."""
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
    sizes = dict(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[True, True],
        latents_mean=[0.1, -0.2, 0.3, 0.05],
        latents_std=[1.5, 0.8, 2.0, 1.2],
        scale_factor_spatial=4,  # the pipelines take the factor from the config
    )
    vae = AutoencoderKLWan(**{**sizes, **vae_options})
    return tokenizer, text_encoder, vae


def _transformer(in_channels=12, **image):
    """A 2-layer transformer over the 4 noisy, 4 mask and 4 image latent channels."""
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=in_channels,
        out_channels=4,
        text_dim=16,
        freq_dim=16,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
        **image,
    )


def make_wan21_i2v_pipeline(directory: Path, first_last: bool = False):
    """Wan 2.1 I2V: CLIP vision's ``hidden_states[-2]`` (16 wide) through the image embedder;
    ``first_last``: FLF2V's, two images' 5 tokens joined under ``pos_embed``."""
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
    joined = dict(pos_embed_seq_len=2 * ((CLIP_SIZE // 8) ** 2 + 1)) if first_last else {}
    transformer = _transformer(image_dim=16, added_kv_proj_dim=24, **joined)
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


def make_wan22_ti2v_pipeline(directory: Path):
    """Wan 2.2 TI2V-5B's layout: a ``WanPipeline`` with ``expand_timesteps``, the Wan 2.2 VAE
    (residual, 2x2 pixel patches: 8 pixels a latent), a transformer over its 4 latent channels
    alone. Returns ``(WanPipeline, WanImageToVideoPipeline)`` of the same components, as
    diffusers runs the hub's checkpoint for text and for image to video."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline, WanPipeline

    torch.manual_seed(2)
    wan22_vae = dict(is_residual=True, patch_size=2, in_channels=12, out_channels=12)
    tokenizer, text_encoder, vae = _components(
        **wan22_vae, decoder_base_dim=12, scale_factor_spatial=8
    )
    transformer = _transformer(in_channels=4)
    _perturbed(text_encoder, transformer, vae)
    parts = dict(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=UniPCMultistepScheduler(**HUB_SCHEDULER),
        transformer=transformer,
        expand_timesteps=True,
    )
    pipe = WanPipeline(**parts)
    pipe.save_pretrained(directory)
    return pipe, WanImageToVideoPipeline(**parts)


def random_image(height: int, width: int, seed: int = 5):
    """A seeded random RGB picture of ``width`` x ``height``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def diffusers_i2v_frames(pipe, image, latents, options: dict, monkeypatch, **images):
    """``pipe``'s frames (``WanImageToVideoPipeline``) from ``image`` and ``latents`` (numpy),
    ``options`` and ``images`` (``last_image``) as keywords."""
    import types

    import torch
    from diffusers.pipelines.wan import pipeline_wan_i2v

    # diffusers' I2V prompt cleaning calls ftfy even where it is not installed (its T2V
    # pipeline checks); ftfy leaves a plain ASCII prompt as it is, as mobius's cleaning does
    if not hasattr(pipeline_wan_i2v, "ftfy"):
        monkeypatch.setattr(
            pipeline_wan_i2v, "ftfy", types.SimpleNamespace(fix_text=str), raising=False
        )
    with torch.no_grad():
        return pipe(
            image,
            PROMPT,
            latents=torch.from_numpy(latents),
            output_type="np",
            **options,
            **images,
        ).frames
