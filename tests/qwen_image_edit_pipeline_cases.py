"""A tiny random Qwen-Image Edit pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`qwen_image_pipeline_cases` (its transformer, VAE, text encoder and scheduler
configs): :func:`make_qwen_image_edit_pipeline` saves a diffusers ``QwenImageEditPipeline``
(float32, eval) with ``save_pretrained`` and returns it. The processor is transformers'
``Qwen2VLProcessor`` over its PIL image processor (4-pixel patches, merge 2, at most
:data:`MAX_PIXELS` pixels: a handful of image tokens) and a word-level tokenizer with Qwen's
chat and vision tokens at the ids the text encoder's config names; it splits the edit
template as Qwen's tokenizer does (``'s`` and ``),`` are one token each), so the 64
leading tokens the pipeline drops end at ``<|im_start|>user\\n``.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline_cases import WORDS, _perturbed
from qwen_image_pipeline_cases import HUB_SCHEDULER, TEXT_WIDTH, tiny_qwen2_5_vl

#: The processor's pixel bound: the edit image (already at the pipeline's area) is resized
#: to at most this many pixels before the vision tower.
MAX_PIXELS = 32 * 32
#: The vision tokens after the word-level vocabulary, in the order ``tiny_qwen2_5_vl``
#: numbers them (its ``image_token_id`` is the size it is given).
VISION_TOKENS = ("<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>")


def tiny_qwen_edit_tokenizer():
    """Word-level: <|endoftext|> 0 (the pad), <|im_start|> 1, <|im_end|> 2, <unk> 3, the edit
    template's pieces, :data:`WORDS`, "make" and "it", then :data:`VISION_TOKENS`."""
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mobius_diffusion.pipelines.qwen_image_edit import EDIT_PROMPT_TEMPLATE

    chat_tokens = ("<|im_start|>", "<|im_end|>")
    vocab = {"<|endoftext|>": 0, chat_tokens[0]: 1, chat_tokens[1]: 2, "<unk>": 3}
    template = re.sub(r"<\|[a-z_]+\|>|\{\}", " ", EDIT_PROMPT_TEMPLATE)
    pieces = r"'s|\),|[^\w ]"
    for piece in (*re.findall(rf"{pieces}|\w+", template), *WORDS, "make", "it"):
        vocab.setdefault(piece, len(vocab))
    for token in VISION_TOKENS:
        vocab[token] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(" +"), behavior="removed"),
            pre_tokenizers.Split(Regex(pieces), behavior="isolated"),
        ]
    )
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True) for t in (*chat_tokens, *VISION_TOKENS)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[*chat_tokens, *VISION_TOKENS],
    )


def tiny_qwen_processor(tokenizer, vision_config):
    """transformers' ``Qwen2VLProcessor`` over the PIL image processor of the tower's patches."""
    from transformers import Qwen2VLProcessor, Qwen2VLVideoProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    sizes = dict(
        patch_size=vision_config.patch_size,
        temporal_patch_size=vision_config.temporal_patch_size,
        merge_size=vision_config.spatial_merge_size,
    )
    image_processor = Qwen2VLImageProcessorPil(min_pixels=8 * 8, max_pixels=MAX_PIXELS, **sizes)
    return Qwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(**sizes),
    )


def make_qwen_image_edit_pipeline(directory: Path):
    """A tiny ``QwenImageEditPipeline`` saved into ``directory``: the text-to-image case's
    transformer (2 layers, 4-channel latents) and causal VAE (a factor of 4, its own
    ``latents_mean``/``latents_std``), a Qwen2.5-VL text encoder whose image tokens are the
    tokenizer's, and the hub's scheduler config."""
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageEditPipeline,
        QwenImageTransformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_qwen_edit_tokenizer()
    # image_token_id: <|image_pad|>'s id, the second of VISION_TOKENS
    text_encoder = tiny_qwen2_5_vl(len(tokenizer) - len(VISION_TOKENS) + 1)
    assert text_encoder.config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert text_encoder.config.text_config.vocab_size == len(tokenizer)
    transformer = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=TEXT_WIDTH,
        axes_dims_rope=[4, 6, 6],
    )
    vae = AutoencoderKLQwenImage(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[False, True],
        latents_mean=[0.1, -0.2, 0.3, 0.05],
        latents_std=[1.5, 0.8, 2.0, 1.2],
    )
    _perturbed(text_encoder, transformer, vae)
    pipe = QwenImageEditPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        processor=tiny_qwen_processor(tokenizer, text_encoder.config.vision_config),
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
