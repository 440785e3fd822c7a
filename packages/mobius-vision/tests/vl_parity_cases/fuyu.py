"""Fuyu over Persimmon: 8-pixel patches of images padded to 24x32 (3 rows of 4), qk-layernorm;
an odd 5-pixel patch over a 20x30 canvas without qk-layernorm, tied head.

Two stand-ins make transformers' own FuyuProcessor run here:
- the PIL image processor's ``patchify_image`` is numpy code, but FuyuProcessor hands it
  torch tensors: the case converts around it (the same numbers as the torch backend's unfold);
- FuyuProcessor drops the first token of the placeholder text, which Fuyu's real
  sentencepiece tokenizer starts with a bare ``▁``: the tiny tokenizer prepends ``▁`` to
  every text the same way, and splits the placeholder tokens out as ordinary words.
"""

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
from transformers import AutoConfig, FuyuProcessor, PreTrainedTokenizerFast
from transformers.models.fuyu.image_processing_pil_fuyu import FuyuImageProcessorPil

IMAGE_TOKEN_ID = 3  # |SPEAKER|
SPECIAL_TOKENS = {"|SPEAKER|": IMAGE_TOKEN_ID, "|NEWLINE|": 4, "<s>": 5, "<0x04>": 6}
FIRST_WORD = 7
PERSIMMON = dict(
    model_type="persimmon",
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=96,
    max_position_embeddings=256,
    qk_layernorm=True,
)
PROMPTS = ("w9 w11 w13", "w7 w8 w10 w12")


class PatchifyTorch(FuyuImageProcessorPil):
    """The PIL processor, its numpy ``patchify_image`` given the torch tensors FuyuProcessor passes."""

    def patchify_image(self, image, patch_size=None):
        return torch.from_numpy(np.asarray(super().patchify_image(image.numpy(), patch_size)))


class PixelValuesFuyuProcessor(FuyuProcessor):
    """FuyuProcessor returning ``pixel_values`` (transformers' new name) instead of
    ``image_patches``, as numpy (with images it returns torch tensors whatever is asked)."""

    def __call__(self, images=None, text=None, **kwargs):
        out = super().__call__(images=images, text=text, return_legacy_image_output=False, **kwargs)
        return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in out.items()}


def sentencepiece_like_tokenizer(vocab_size: int):
    vocab = {"<unk>": 0, "<pad>": 1, "▁": 2, **SPECIAL_TOKENS}
    vocab.update({f"w{i}": i for i in range(FIRST_WORD, vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Prepend("▁ ")
    specials = "|".join(_escape(s) for s in SPECIAL_TOKENS)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(specials), "isolated"), pre_tokenizers.WhitespaceSplit()]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", padding_side="left"
    )


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def fuyu_config(text=PERSIMMON, **overrides):
    def make():
        return AutoConfig.for_model(
            "fuyu", text_config=dict(text), image_token_id=IMAGE_TOKEN_ID, **overrides
        )

    return make


def fuyu_processor(height: int, width: int):
    def make(config):
        patch = config.patch_size
        return PixelValuesFuyuProcessor(
            image_processor=PatchifyTorch(
                size={"height": height, "width": width},
                patch_size={"height": patch, "width": patch},
            ),
            tokenizer=sentencepiece_like_tokenizer(config.text_config.vocab_size),
        )

    return make


CASES = {
    "fuyu-persimmon": (
        "fuyu",
        fuyu_config(patch_size=8),
        fuyu_processor(24, 32),
        dict(prompts=PROMPTS),
    ),
    "fuyu-persimmon-patch5-no-qk-norm-tied": (
        "fuyu",
        fuyu_config(dict(PERSIMMON, qk_layernorm=False), patch_size=5, tie_word_embeddings=True),
        fuyu_processor(20, 30),
        dict(prompts=PROMPTS),
    ),
}
