"""A tiny random Qwen-Image pipeline for the end-to-end tests: every parameter perturbed, no hub.

As :mod:`pipeline_cases`: :func:`make_qwen_image_pipeline` saves a diffusers
``QwenImagePipeline`` (float32, eval) with ``save_pretrained`` and returns it. The text
encoder is a whole ``Qwen2_5_VLForConditionalGeneration`` (vision tower included, as the
hub's Qwen/Qwen-Image holds it); the tokenizer is word-level with Qwen's chat tokens and
splits the prompt template into the 34 leading tokens Qwen's own tokenizer makes, so the
pipeline's drop of them leaves the prompt's tokens.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline_cases import WORDS, _perturbed

TEXT_WIDTH = 16
#: Qwen/Qwen-Image's scheduler/scheduler_config.json: its fields that differ from
#: FlowMatchEulerDiscreteScheduler's defaults (the dynamic shift and its terminal stretch).
HUB_SCHEDULER = dict(
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=0.9,
    max_image_seq_len=8192,
    shift_terminal=0.02,
)


def tiny_qwen_tokenizer():
    """Word-level: <|endoftext|> 0 (the pad), <|im_start|> 1, <|im_end|> 2, <unk> 3, then the
    template's words, punctuation and newlines (each a token, as in Qwen's) and :data:`WORDS`."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mobius_diffusion.pipelines.qwen_image import PROMPT_TEMPLATE

    chat_tokens = ("<|im_start|>", "<|im_end|>")
    vocab = {"<|endoftext|>": 0, chat_tokens[0]: 1, chat_tokens[1]: 2, "<unk>": 3}
    template = re.sub(r"<\|im_(start|end)\|>|\{\}", " ", PROMPT_TEMPLATE)
    for piece in (*re.findall(r"\w+|[^\w ]", template), *WORDS):
        vocab.setdefault(piece, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(" +"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"[^\w ]"), behavior="isolated"),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(chat_tokens),
    )


def tiny_qwen2_5_vl(vocab_size: int):
    """A 2-layer Qwen2.5-VL (multimodal RoPE, grouped KV heads) with a 1-block vision tower."""
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    text = dict(
        vocab_size=vocab_size + 3,
        hidden_size=TEXT_WIDTH,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,  # heads of 8 channels: Qwen2.5-VL reads no head_dim
        num_key_value_heads=1,
        bos_token_id=0,  # the tokenizer's ids (Qwen's defaults are past this vocabulary)
        eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]},
    )
    vision = dict(
        depth=1,
        hidden_size=16,
        intermediate_size=24,
        num_heads=2,
        out_hidden_size=TEXT_WIDTH,
        patch_size=4,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=16,
        fullatt_block_indexes=[0],
    )
    config = AutoConfig.for_model(
        "qwen2_5_vl",
        text_config=text,
        vision_config=vision,
        image_token_id=vocab_size,  # past the tokenizer's ids: never in a prompt
        video_token_id=vocab_size + 1,
        vision_start_token_id=vocab_size + 2,
    )
    return Qwen2_5_VLForConditionalGeneration._from_config(config, attn_implementation="eager")


def make_qwen_image_pipeline(directory: Path):
    """A tiny ``QwenImagePipeline`` saved into ``directory``: a 2-layer transformer over
    4-channel latents (16 packed), a VAE that halves space twice (time once, unused on an
    image) with its own ``latents_mean``/``latents_std``, the hub's scheduler config."""
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_qwen_tokenizer()
    text_encoder = tiny_qwen2_5_vl(len(tokenizer))
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
    pipe = QwenImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUB_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(directory, safe_serialization=True)
    return pipe
