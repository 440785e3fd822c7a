"""Tiny random diffusers pipelines for the end-to-end tests: every parameter perturbed, no hub.

Each maker returns the diffusers pipeline object (float32, eval) after saving it with
``save_pretrained`` into ``directory``; tokenizers are made here from a few words.
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ("a", "red", "blue", "bicycle", "cat", "on", "the", "moon")
PROMPT = "a red cat on the moon"
CLIP_LENGTH = 12


def tiny_clip_tokenizer(directory: Path, pad_token: str = "<|endoftext|>"):
    """A byte-pair CLIP tokenizer over lowercase letters and the whole words of :data:`WORDS`.

    ids: 0 start, 1 end (the pad unless ``pad_token``), then letters, letters ending a
    word, words.
    """
    from transformers import CLIPTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    vocab.update({c: len(vocab) + i for i, c in enumerate(letters)})
    vocab.update({f"{c}</w>": len(vocab) + i for i, c in enumerate(letters)})
    merges = []
    for word in WORDS:  # merge each word left to right into one token
        pieces = [*word[:-1], f"{word[-1]}</w>"]
        while len(pieces) > 1:
            merges.append(f"{pieces[0]} {pieces[1]}")
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
            vocab.setdefault(pieces[0], len(vocab))
    (directory / "vocab.json").write_text(json.dumps(vocab))
    unique = list(dict.fromkeys(merges))
    (directory / "merges.txt").write_text("\n".join(["#version: 0.2", *unique]) + "\n")
    return CLIPTokenizer(
        str(directory / "vocab.json"),
        str(directory / "merges.txt"),
        model_max_length=CLIP_LENGTH,
        pad_token=pad_token,
    )


def tiny_word_tokenizer():
    """A word-level fast tokenizer (T5's role): <pad> 0, </s> 1, <unk> 2, then :data:`WORDS`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({w: 3 + i for i, w in enumerate(WORDS)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )  # T5 ends each text with </s>
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="</s>",
        padding_side="right",
    )


def _clip_text_encoder(vocab_size: int, hidden: int, projection_dim: int | None = None):
    """A 2-layer CLIP text tower; with ``projection_dim``, a ``CLIPTextModelWithProjection``."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=CLIP_LENGTH,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    if projection_dim:
        config.projection_dim = projection_dim
    return CLIPTextModelWithProjection(config) if projection_dim else CLIPTextModel(config)


def tiny_t5(vocab_size: int, width: int):
    """A 2-layer ``T5EncoderModel`` of ``width`` (d_model), gated GELU as T5 v1.1."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=vocab_size,
        d_model=width,
        d_kv=8,
        d_ff=24,
        num_layers=2,
        num_heads=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        decoder_start_token_id=0,
    )
    return T5EncoderModel(config)


def _perturbed(*models):
    from mobius.testing import perturb_parameters

    for seed, model in enumerate(models):
        perturb_parameters(model, seed)
        model.eval()


def _tiny_vae(**options):
    """A two-level AutoencoderKL with four latent channels; ``options`` add the pipeline's own."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        **options,
    )


def make_sd_pipeline(directory: Path, lcm: bool = False):
    """A tiny ``StableDiffusionPipeline`` (Euler scheduler, SD betas) saved into ``directory``;
    ``lcm``: a ``LatentConsistencyModelPipeline`` instead (the UNet takes the guidance
    embedding, ``time_cond_proj_dim``; LCM's scheduler)."""
    import torch
    from diffusers import (
        EulerDiscreteScheduler,
        LatentConsistencyModelPipeline,
        LCMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = _clip_text_encoder(len(tokenizer), 16)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        cross_attention_dim=16,
        attention_head_dim=2,
        norm_num_groups=4,
        time_cond_proj_dim=6 if lcm else None,
    )
    vae = _tiny_vae(
        sample_size=16,
        scaling_factor=0.5,
    )
    _perturbed(text_encoder, unet, vae)
    betas = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")
    if lcm:
        pipe = LatentConsistencyModelPipeline(
            vae=vae,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            unet=unet,
            scheduler=LCMScheduler(**betas, set_alpha_to_one=False),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipe.save_pretrained(directory, safe_serialization=True)
        return pipe
    scheduler = EulerDiscreteScheduler(**betas, steps_offset=1)
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def make_sdxl_pipeline(directory: Path):
    """A tiny ``StableDiffusionXLPipeline`` saved into ``directory``.

    Two CLIP encoders (the second with a projection, its tokenizer padding with a
    word as SDXL's pads with "!"), a UNet with the ``text_time`` added embedding, a
    VAE with ``latents_mean``/``latents_std``; Euler with SDXL's leading spacing.
    """
    import torch
    from diffusers import (
        EulerDiscreteScheduler,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    tokenizer_2 = tiny_clip_tokenizer(directory.parent / "clip-tokenizer-2", pad_token="a</w>")
    text_encoder = _clip_text_encoder(len(tokenizer), 12)
    text_encoder_2 = _clip_text_encoder(len(tokenizer_2), 16, projection_dim=8)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        transformer_layers_per_block=(1, 2),
        cross_attention_dim=12 + 16,  # both encoders' states side by side
        attention_head_dim=(1, 2),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=8 + 6 * 4,  # pooled text, 6 size ids
        norm_num_groups=4,
    )
    vae = _tiny_vae(
        sample_size=16,
        scaling_factor=0.4,
        latents_mean=(0.1, -0.2, 0.05, 0.3),
        latents_std=(0.9, 1.2, 0.7, 1.1),
    )
    _perturbed(text_encoder, text_encoder_2, unet, vae)
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        steps_offset=1,
        timestep_spacing="leading",
    )
    pipe = StableDiffusionXLPipeline(
        vae=vae,
        text_encoder=text_encoder,
        text_encoder_2=text_encoder_2,
        tokenizer=tokenizer,
        tokenizer_2=tokenizer_2,
        unet=unet,
        scheduler=scheduler,
        add_watermarker=False,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def make_flux_pipeline(directory: Path, guidance_embeds: bool = True):
    """A tiny ``FluxPipeline`` (CLIP + T5 encoder, dynamic-shift flow matching) saved into ``directory``."""
    import torch
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        FluxPipeline,
        FluxTransformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = _clip_text_encoder(len(tokenizer), 12)
    tokenizer_2 = tiny_word_tokenizer()
    text_encoder_2 = tiny_t5(len(tokenizer_2), 16)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=16,
        pooled_projection_dim=12,
        guidance_embeds=guidance_embeds,
        axes_dims_rope=[4, 6, 6],
    )
    vae = _tiny_vae(
        sample_size=32,
        scaling_factor=0.6,
        shift_factor=0.1,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    _perturbed(text_encoder, text_encoder_2, transformer, vae)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15
    )
    pipe = FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
