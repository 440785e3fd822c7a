"""Tiny random Chroma and AuraFlow pipelines for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: each maker saves a diffusers pipeline (float32, eval) with
``save_pretrained`` into ``directory`` and returns it. Both are laid out as the hub
holds them: Chroma (``lodestones/Chroma1-HD``) a ``T5EncoderModel`` and Flux's VAE with
a shift factor; AuraFlow (``fal/AuraFlow-v0.3``) a ``UMT5EncoderModel`` and SDXL's VAE;
both flow-matching Euler.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, _tiny_vae, tiny_t5, tiny_word_tokenizer


def make_chroma_pipeline(directory: Path):
    """A tiny ``ChromaPipeline`` (T5 16 wide, a 1+1-layer transformer, dynamic-shift flow matching)."""
    import torch
    from diffusers import ChromaPipeline, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), 16)
    transformer = ChromaTransformer2DModel(
        patch_size=1,
        in_channels=16,  # 4 latent channels in 2x2 packed patches
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=16,
        axes_dims_rope=[4, 6, 6],
        approximator_num_channels=16,
        approximator_hidden_dim=24,
        approximator_layers=1,
    )
    vae = _tiny_vae(
        sample_size=32,
        scaling_factor=0.6,
        shift_factor=0.1,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    _perturbed(text_encoder, transformer, vae)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15
    )
    pipe = ChromaPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def make_auraflow_pipeline(directory: Path):
    """A tiny ``AuraFlowPipeline`` (UMT5 16 wide, a 1+1-layer transformer, flow matching with a fixed shift)."""
    import torch
    from diffusers import (
        AuraFlowPipeline,
        AuraFlowTransformer2DModel,
        FlowMatchEulerDiscreteScheduler,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
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
    transformer = AuraFlowTransformer2DModel(
        sample_size=16,
        patch_size=2,
        in_channels=4,
        num_mmdit_layers=1,
        num_single_dit_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        caption_projection_dim=16,
        out_channels=4,
        pos_embed_max_size=64,  # an 8x8 table; the 8x6 patch grid takes its middle
    )
    vae = _tiny_vae(sample_size=32, scaling_factor=0.45)
    _perturbed(text_encoder, transformer, vae)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.73)  # fal/AuraFlow-v0.3's
    pipe = AuraFlowPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
