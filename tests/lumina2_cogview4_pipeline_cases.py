"""Tiny random Lumina 2 and CogView4 pipelines for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: each maker saves a diffusers pipeline (float32, eval) with
``save_pretrained`` into ``directory`` and returns it. Lumina 2's text encoder is a bare
``Gemma2Model`` (the hub's Lumina-Image-2.0 holds one) with Sana's tiny Gemma tokenizer;
CogView4's a bare ``GlmModel`` with a word-level tokenizer that pads on the left and
starts each text with GLM-4's ``[gMASK] <sop>``, as the hub's CogView4-6B tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import WORDS, _perturbed
from sana_pipeline_cases import GEMMA_WIDTH, tiny_gemma2, tiny_gemma_tokenizer

GLM_WIDTH = 16


def _vae(block_out_channels, **options):
    """An AutoencoderKL of ``len(block_out_channels)`` levels with four latent channels."""
    from diffusers import AutoencoderKL

    levels = len(block_out_channels)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        block_out_channels=block_out_channels,
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        **options,
    )


def make_lumina2_pipeline(directory: Path):
    """A tiny ``Lumina2Pipeline`` saved into ``directory``.

    The VAE has 4 levels (factor 8: diffusers' Lumina 2 pipeline assumes 8) and a shift
    factor; the scheduler is flow matching with the hub's static shift of 6.
    """
    import torch
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        Lumina2Pipeline,
        Lumina2Transformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_gemma_tokenizer()  # the system prompt's words are mostly <unk>
    text_encoder = tiny_gemma2(len(tokenizer))
    transformer = Lumina2Transformer2DModel(
        sample_size=4,
        patch_size=2,
        in_channels=4,
        hidden_size=32,
        num_layers=2,
        num_refiner_layers=1,
        num_attention_heads=2,
        num_kv_heads=1,
        multiple_of=16,
        axes_dim_rope=(4, 6, 6),
        axes_lens=(64, 16, 16),
        cap_feat_dim=GEMMA_WIDTH,
    )
    vae = _vae((8, 8, 8, 8), sample_size=32, scaling_factor=0.6, shift_factor=0.1)
    _perturbed(text_encoder, transformer, vae)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=6.0)
    pipe = Lumina2Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe


def tiny_glm_tokenizer():
    """Word-level, GLM-4's layout: <pad> 0, [gMASK] 1, <sop> 2, <unk> 3, then words; left padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "[gMASK]": 1, "<sop>": 2, "<unk>": 3}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[gMASK] <sop> $A", special_tokens=[("[gMASK]", 1), ("<sop>", 2)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        padding_side="left",
    )


def tiny_glm(vocab_size: int):
    """A 2-layer ``GlmModel`` (partial rotary, grouped KV heads, biased q/k/v)."""
    from transformers import GlmConfig, GlmModel

    config = GlmConfig(
        vocab_size=vocab_size,
        hidden_size=GLM_WIDTH,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        pad_token_id=0,
    )
    return GlmModel(config)


def make_cogview4_pipeline(directory: Path):
    """A tiny ``CogView4Pipeline`` saved into ``directory``.

    A two-level VAE (factor 2) without a shift factor, and flow matching with CogView4's
    dynamic linear time shift (``mu`` from the image size), as the hub's config.
    """
    import torch
    from diffusers import (
        CogView4Pipeline,
        CogView4Transformer2DModel,
        FlowMatchEulerDiscreteScheduler,
    )

    torch.manual_seed(0)
    tokenizer = tiny_glm_tokenizer()
    text_encoder = tiny_glm(len(tokenizer))
    transformer = CogView4Transformer2DModel(
        patch_size=2,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        text_embed_dim=GLM_WIDTH,
        time_embed_dim=12,
        condition_dim=6,
        pos_embed_max_size=16,
        sample_size=8,
        rope_axes_dim=(6, 10),
    )
    vae = _vae((8, 16), sample_size=32, scaling_factor=0.7)
    _perturbed(text_encoder, transformer, vae)
    scheduler = FlowMatchEulerDiscreteScheduler(
        base_shift=0.25,
        max_shift=0.75,
        base_image_seq_len=256,
        use_dynamic_shifting=True,
        time_shift_type="linear",
    )
    pipe = CogView4Pipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
