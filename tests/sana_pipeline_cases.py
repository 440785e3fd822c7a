"""A tiny random Sana pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_sana_pipeline` saves a diffusers ``SanaPipeline``
(float32, eval) with ``save_pretrained`` and returns it. Its text encoder is a bare
``Gemma2Model`` (as the hub's Sana repos hold it), its tokenizer a word-level one with
Gemma's special tokens (``<bos>`` starts every text, pads on the right).
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import WORDS, _perturbed

#: A few words of Sana's instruction, so that it is not all ``<unk>``.
INSTRUCTION_WORDS = ("User", "Prompt:", "A", "prompt", "the", "image", "cat", "-")
GEMMA_WIDTH = 16


def tiny_gemma_tokenizer():
    """Word-level, Gemma's special tokens: <pad> 0, <eos> 1, <bos> 2, <unk> 3, then words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for word in (*WORDS, *INSTRUCTION_WORDS):
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", 2)]
    )  # Gemma starts each text with <bos>
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side="right",
    )


def tiny_gemma2(vocab_size: int):
    """A 2-layer ``Gemma2Model`` (one sliding-window layer, soft-capped attention logits)."""
    from transformers import Gemma2Config, Gemma2Model

    config = Gemma2Config(
        vocab_size=vocab_size,
        hidden_size=GEMMA_WIDTH,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        query_pre_attn_scalar=8,
        sliding_window=16,  # shorter than the instruction: the window matters
        attn_logit_softcapping=50.0,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return Gemma2Model(config)


def make_sana_pipeline(directory: Path):
    """A tiny ``SanaPipeline`` saved into ``directory``.

    A learned-sigma transformer (8 output channels for 4) with ``timestep_scale`` 0.5
    (so a forgotten scale shows), a DC-AE of factor 4 (ResBlocks then EfficientViT
    blocks, as Sana's), and DPM-Solver++ over flow sigmas as the hub's Sana
    ``scheduler_config.json`` (``use_flow_sigmas``, ``flow_shift`` 3, ``flow_prediction``).
    """
    import torch
    from diffusers import (
        AutoencoderDC,
        DPMSolverMultistepScheduler,
        SanaPipeline,
        SanaTransformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_gemma_tokenizer()
    text_encoder = tiny_gemma2(len(tokenizer))
    transformer = SanaTransformer2DModel(
        in_channels=4,
        out_channels=8,
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=2,
        num_cross_attention_heads=2,
        cross_attention_head_dim=8,
        cross_attention_dim=16,
        caption_channels=GEMMA_WIDTH,
        mlp_ratio=2.5,
        sample_size=8,
        patch_size=1,
        timestep_scale=0.5,
    )
    vae = AutoencoderDC(
        in_channels=3,
        latent_channels=4,
        attention_head_dim=4,
        encoder_block_types=("ResBlock", "EfficientViTBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "EfficientViTBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 16, 16),
        decoder_block_out_channels=(8, 16, 16),
        encoder_layers_per_block=(1, 1, 1),
        decoder_layers_per_block=(1, 1, 1),
        encoder_qkv_multiscales=((), (5,), (5,)),
        decoder_qkv_multiscales=((), (5,), (5,)),
        downsample_block_type="Conv",
        upsample_block_type="interpolate",
        scaling_factor=0.41407,
    )
    _perturbed(text_encoder, transformer, vae)
    scheduler = DPMSolverMultistepScheduler(
        algorithm_type="dpmsolver++",
        solver_order=2,
        use_flow_sigmas=True,
        flow_shift=3.0,
        prediction_type="flow_prediction",
    )
    pipe = SanaPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=scheduler,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
