"""A tiny random HiDream-I1 pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_hidream_pipeline` saves a diffusers
``HiDreamImagePipeline`` (float32, eval) with ``save_pretrained`` and returns it. Its
four text encoders: two ``CLIPTextModelWithProjection`` (8-wide projections: a 16-wide
pooled text; 128 positions), a ``T5EncoderModel`` and a 3-layer ``LlamaForCausalLM`` whose tokenizer
is saved with its own pad token, as the hub's Llama 3 tokenizer (the pipeline pads with
the end token instead).
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import _perturbed, tiny_clip_tokenizer, tiny_t5, tiny_word_tokenizer

T5_WIDTH, LLAMA_WIDTH = 12, 16
#: HiDream-ai/HiDream-I1-Full's scheduler/scheduler_config.json: its fields that differ from
#: UniPCMultistepScheduler's defaults (flow sigmas shifted by 3).
HUB_SCHEDULER = dict(flow_shift=3.0, prediction_type="flow_prediction", use_flow_sigmas=True)


def long_clip(vocab_size: int, hidden: int):
    """A 2-layer ``CLIPTextModelWithProjection`` (8-wide projection) of 128 positions: the
    pipeline pads CLIP texts to ``min(max_sequence_length, 218)``, 128 by default (the hub's
    HiDream CLIP encoders take 248)."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=128,
        projection_dim=8,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    return CLIPTextModelWithProjection(config)


def tiny_llama(vocab_size: int):
    """A 3-layer ``LlamaForCausalLM`` (grouped KV heads) of :data:`LLAMA_WIDTH`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=LLAMA_WIDTH,
        intermediate_size=24,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=1,
        eos_token_id=1,
    )
    return LlamaForCausalLM(config)


def make_hidream_pipeline(directory: Path):
    """A tiny ``HiDreamImagePipeline`` saved into ``directory``.

    The transformer: 4 latent channels in 8x8 patches (the pipeline's latents are always
    about 128 x 128), one block of each kind, 4 routed experts (2 active), Llama layers 2
    and 0 for its two blocks, ``max_resolution`` 128 x 192 (a non-square grid is padded to
    384 patches). The VAE has one level (factor 1, no mid-block attention over the
    128 x 128 latents) and a shift factor; the scheduler is HiDream-I1 Full's UniPC.
    """
    import torch
    from diffusers import (
        AutoencoderKL,
        HiDreamImagePipeline,
        HiDreamImageTransformer2DModel,
        UniPCMultistepScheduler,
    )

    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    tokenizer_2 = tiny_clip_tokenizer(directory.parent / "clip-tokenizer-2", pad_token="a</w>")
    tokenizer_3, tokenizer_4 = tiny_word_tokenizer(), tiny_word_tokenizer()
    text_encoder = long_clip(len(tokenizer), 12)
    text_encoder_2 = long_clip(len(tokenizer_2), 16)
    text_encoder_3 = tiny_t5(len(tokenizer_3), T5_WIDTH)
    text_encoder_4 = tiny_llama(len(tokenizer_4))
    transformer = HiDreamImageTransformer2DModel(
        patch_size=8,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        caption_channels=[T5_WIDTH, LLAMA_WIDTH],
        text_emb_dim=16,
        num_routed_experts=4,
        num_activated_experts=2,
        axes_dims_rope=[4, 6, 6],
        max_resolution=[128, 192],
        llama_layers=[2, 0],
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(8,),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        mid_block_add_attention=False,
        scaling_factor=0.6,
        shift_factor=0.1,
    )
    _perturbed(text_encoder, text_encoder_2, text_encoder_3, text_encoder_4, transformer, vae)
    pipe = HiDreamImagePipeline(
        scheduler=UniPCMultistepScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        text_encoder_3=text_encoder_3,
        tokenizer_3=tokenizer_3,
        text_encoder_4=text_encoder_4,
        tokenizer_4=tokenizer_4,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    # the pipeline set its tokenizer's pad token to the end token; the hub's keeps its own
    tiny_word_tokenizer().save_pretrained(directory / "tokenizer_4")
    return pipe
