"""A tiny random HunyuanVideo pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_hunyuan_video_pipeline` saves a diffusers
``HunyuanVideoPipeline`` (float32, eval) with ``save_pretrained`` and returns it. Its text
encoder is a bare 3-layer ``LlamaModel`` (as the hub's ``hunyuanvideo-community/HunyuanVideo``
holds one) with a word-level tokenizer that cuts text as Llama 3's does (the default prompt
template's ``crop_start`` of 95 holds), has its header tokens and starts each text with
``<|begin_of_text|>`` (right padding); ``text_encoder_2`` a ``CLIPTextModel`` of 77
positions (the pipeline pads CLIP's text to 77 tokens).
"""

from __future__ import annotations

from pathlib import Path

from pipeline_cases import WORDS, _perturbed, tiny_clip_tokenizer

LLAMA_WIDTH, CLIP_WIDTH = 16, 12
#: Llama 3's special tokens the prompt template uses.
SPECIAL = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
#: Llama 3's pre-tokenizer in small: blank-line runs, single digits, words and punctuation
#: marks with their leading space, lone spaces. It cuts the default prompt template before
#: the prompt into 95 tokens with ``<|begin_of_text|>``: the hub's ``crop_start``.
PIECES = r"\n\n|[0-9]| ?[A-Za-z]+| ?[^\sA-Za-z0-9]| "
TEMPLATE_WORDS = ("system", "user", "Describe", " the", " video", " of", " and")


def tiny_llama_tokenizer():
    """Word-level over :data:`PIECES`: <pad> 0, <unk> 1, Llama 3's special tokens, then words
    (bare and after a space); ``<|begin_of_text|>`` first, right padding."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1}
    for word in (*SPECIAL, *WORDS, *(f" {w}" for w in WORDS), *TEMPLATE_WORDS):
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(PIECES), "isolated")
    bos = SPECIAL[0]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, vocab[bos])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token=bos,
        eos_token="<|eot_id|>",
        additional_special_tokens=list(SPECIAL[1:3]),
        padding_side="right",
    )


def tiny_llama(vocab_size: int):
    """A 3-layer ``LlamaModel`` (grouped KV heads): ``hidden_states[-3]`` is layer 1's output."""
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=LLAMA_WIDTH,
        intermediate_size=24,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=0,
    )
    return LlamaModel(config)


def clip_77(vocab_size: int):
    """A 2-layer ``CLIPTextModel`` of 77 positions."""
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=CLIP_WIDTH,
        intermediate_size=2 * CLIP_WIDTH,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    return CLIPTextModel(config)


def make_hunyuan_video_pipeline(directory: Path):
    """A tiny ``HunyuanVideoPipeline`` saved into ``directory``.

    The transformer: 4 latent channels, 2 x 2 patches, one block of each kind and one
    refiner block, guidance-distilled. The VAE halves space and time twice (factors 4 and
    4) and keeps the hub's scaling factor; the scheduler is the hub's flow matching with
    a static shift of 7.
    """
    import torch
    from diffusers import (
        AutoencoderKLHunyuanVideo,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideoPipeline,
        HunyuanVideoTransformer3DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_llama_tokenizer()
    tokenizer_2 = tiny_clip_tokenizer(directory.parent / "clip-tokenizer")
    text_encoder = tiny_llama(len(tokenizer))
    text_encoder_2 = clip_77(len(tokenizer_2))
    transformer = HunyuanVideoTransformer3DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=12,
        num_layers=1,
        num_single_layers=1,
        num_refiner_layers=1,
        patch_size=2,
        patch_size_t=1,
        text_embed_dim=LLAMA_WIDTH,
        pooled_projection_dim=CLIP_WIDTH,
        rope_axes_dim=(4, 4, 4),
    )
    vae = AutoencoderKLHunyuanVideo(
        latent_channels=4,
        down_block_types=("HunyuanVideoDownBlock3D",) * 3,
        up_block_types=("HunyuanVideoUpBlock3D",) * 3,
        block_out_channels=(8, 16, 16),
        layers_per_block=1,
        norm_num_groups=4,
        spatial_compression_ratio=4,
    )
    _perturbed(text_encoder, text_encoder_2, transformer, vae)
    pipe = HunyuanVideoPipeline(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
