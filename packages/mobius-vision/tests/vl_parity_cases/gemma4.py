"""Gemma 4's tiny configs and processor: the patch tower over a wide and a tall image (both
padded to the patch budget), 2x2 position pooling, and the Gemma 4 text decoder with
per-layer inputs and KV sharing.

Gemma 4 builds on the audio-vision-language contract: its parity cases (built from these
pieces, with and without an audio tower) are in ``omni_parity_cases_gemma4.py``, so this
module adds none to the vision–language kit's.

The real ``Gemma4Processor`` (its PIL image processor, 4-pixel patches, at most 70 soft
tokens after 2x2 pooling, so 280 patches) resizes 37x45 (height x width) to 56x72 and
29x21 to 72x56: 252 patches each (63 tokens), then 28 padding patches. The vision tower has
fewer kv heads than heads; the decoder's four layers (sliding, full, sliding, full)
end with one that shares the first full layer's cache, under a window shorter than the prompts.
"""

from transformers import Gemma4Processor
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import VideoProcessorOptional, vl_config

IMAGE, BOI, EOI, AUDIO, BOA, EOA, VIDEO = 5, 6, 7, 8, 9, 10, 11
SPECIAL_TOKENS = {
    "<image_soft_token>": IMAGE,
    "<start_of_image>": BOI,
    "<end_of_image>": EOI,
    "<audio_soft_token>": AUDIO,
    "<start_of_audio>": BOA,
    "<end_of_audio>": EOA,
    "<|video|>": VIDEO,  # the processor adds it: given an id inside the vocabulary
}
NAMED_TOKENS = {
    "image_token": "<image_soft_token>",
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "audio_token": "<audio_soft_token>",
    "boa_token": "<start_of_audio>",
    "eoa_token": "<end_of_audio>",
}
PROMPTS = (
    "USER: <image_soft_token> w15 w17 w19 ASSISTANT:",
    "USER: w13 w18 <image_soft_token> w12",
)
VISION = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    patch_size=4,
    pooling_kernel_size=2,
    position_embedding_size=32,
)
TEXT = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    global_head_dim=16,
    num_global_key_value_heads=1,
    vocab_size=96,
    max_position_embeddings=256,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    sliding_window=8,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        "full_attention": {
            "rope_type": "proportional",
            "partial_rotary_factor": 0.25,
            "rope_theta": 10_000.0,
        },
    },
    num_kv_shared_layers=1,
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=96,
    final_logit_softcapping=3.0,
    pad_token_id=1,
)


def gemma4_config(vision=VISION, text=TEXT, **fields):
    return vl_config(
        "gemma4",
        vision,
        text,
        image_token_id=IMAGE,
        boi_token_id=BOI,
        eoi_token_id=EOI,
        audio_token_id=AUDIO,
        boa_token_id=BOA,
        eoa_token_index=EOA,
        video_token_id=VIDEO,
        **fields,
    )


class ImagesByPrompt:
    """Mixed in before a Gemma processor class: a flat list of images (the audio kit's) goes
    to the prompts in order, as many as each holds (the processor wants one list per prompt)."""

    def __call__(self, text=None, images=None, **kwargs):
        if images and isinstance(text, list) and not isinstance(images[0], list):
            flat = iter(images)
            images = [[next(flat) for _ in range(t.count(self.image_token))] for t in text]
        return super().__call__(text=text, images=images, **kwargs)


class ImageGemma4Processor(ImagesByPrompt, VideoProcessorOptional, Gemma4Processor):
    """Gemma4Processor over images and audio (no video processor; its audio feature
    extractor is numpy)."""


def gemma4_processor(config):
    vision = config.vision_config
    image_processor = Gemma4ImageProcessorPil(
        patch_size=vision.patch_size,
        pooling_kernel_size=vision.pooling_kernel_size,
        max_soft_tokens=70,
    )
    audio = config.audio_config  # the tower reads as many mel bins as its first channels
    mel_bins = 128 if audio is None else audio.subsampling_conv_channels[0]
    return ImageGemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(feature_size=mel_bins),
        image_processor=image_processor,
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS, NAMED_TOKENS),
        video_processor=None,
        image_seq_length=70,
    )


# 3x3 pooling (the checkpoints'; transformers keeps padding rows without pooling, so 1 is
# not a case), standardised tokens, clipped linears (their bounds stay
# infinite: the kit perturbs them by a finite amount), no per-layer inputs, no KV sharing,
# an untied head.
PLAIN_VISION = dict(
    VISION, pooling_kernel_size=3, num_key_value_heads=2, standardize=True, use_clipped_linears=True
)
PLAIN_TEXT = dict(TEXT, hidden_size_per_layer_input=0, num_kv_shared_layers=0)
#: The image prompts' options (test_gemma4_bidirectional_parity.py).
OPTIONS = dict(prompts=PROMPTS, images_per_prompt=True, image_sizes=((37, 45), (29, 21)))
CASES: dict[str, tuple] = {}  # Gemma 4's run through the audio kit (module docstring)
