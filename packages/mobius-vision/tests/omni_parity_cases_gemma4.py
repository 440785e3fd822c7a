"""Gemma 4's tiny cases on the audio-vision-language kit, through the real ``Gemma4Processor``
(its PIL image processor, its numpy ``Gemma4AudioFeatureExtractor``).

- ``gemma4``: the vision tower, the conformer audio tower and the decoder with per-layer
  inputs and KV sharing (``vl_parity_cases/gemma4.py``). Each prompt of the batch holds an
  image and a clip: 3200 samples (20 mel frames of 16 bins, 5 audio tokens) and 1900
  (the shorter padded: 3 tokens). The audio tower's chunks (3 frames) are shorter than its
  left context (5), its logits soft-capped at 2 (so the cap bites).
- ``gemma4-pool3-standardized-plain-text``: a checkpoint without ``audio_config`` (the
  larger hub models): 3x3 pooling, standardised tokens, clipped linears, no per-layer
  inputs, no KV sharing, an untied head; images alone, and the package holds no audio graph.
"""

from vl_parity_cases.gemma4 import (
    PLAIN_TEXT,
    PLAIN_VISION,
    PROMPTS,
    TEXT,
    VISION,
    gemma4_config,
    gemma4_processor,
)

AUDIO = dict(
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    subsampling_conv_channels=[16, 4],
    conv_kernel_size=3,
    attention_chunk_size=3,
    attention_context_left=5,
    attention_context_right=0,
    attention_logit_cap=2.0,
    output_proj_dims=24,
)
AUDIO_PROMPTS = (
    "USER: <image_soft_token> w15 <audio_soft_token> w17 ASSISTANT:",
    "USER: w13 <audio_soft_token> w18 <image_soft_token> w12",
)
IMAGE_SIZES = ((37, 45), (29, 21))
MODEL_CLASS = "Gemma4ForConditionalGeneration"


def gemma4_audio_config(vision=VISION, text=TEXT, **fields):
    """A Gemma 4 config with the tiny audio tower."""
    return gemma4_config(vision, text, audio_config=dict(AUDIO), **fields)


AUDIO_OPTIONS = dict(
    prompts=AUDIO_PROMPTS,
    image_sizes=IMAGE_SIZES,
    clip_lengths=(3200, 1900),
    model_class=MODEL_CLASS,
)
#: case -> (model_type, make_config, make_processor, options)
CASES = {
    "gemma4": ("gemma4", gemma4_audio_config(), gemma4_processor, AUDIO_OPTIONS),
    "gemma4-pool3-standardized-plain-text": (
        "gemma4",
        gemma4_config(PLAIN_VISION, PLAIN_TEXT, tie_word_embeddings=False),
        gemma4_processor,
        dict(prompts=PROMPTS, image_sizes=IMAGE_SIZES, clip_lengths=(), model_class=MODEL_CLASS),
    ),
}
