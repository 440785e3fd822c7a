"""Gemma 4 unified's tiny case: raw merged patches and raw waveform frames into the
Gemma 4 unified decoder, through the real ``Gemma4UnifiedProcessor``.

transformers' unified image processor needs torchvision (not installed here); its
layout is Gemma 4's PIL image processor's with the merged patch as the patch: a
``patch_size * pooling_kernel_size`` side, no pooling, the same resize (its sides
multiples of that side, the same pixel budget). So the case's processor is the
real ``Gemma4UnifiedProcessor`` (its placeholders, token types, and its numpy audio
feature extractor) over ``Gemma4ImageProcessorPil(patch_size=8, pooling_kernel_size=1)``,
what a unified ``patch_size=4, pooling_kernel_size=2`` cuts: 37x45 becomes 56x72 (63 patches),
29x21 72x56 (63), each padded to 70. Frames are 16 samples: the 200-sample clip makes 13
audio tokens, the 90-sample one 6 (the shorter padded with a masked frame).

The decoder is causal here (``use_bidirectional_attention=None``): the shared kit feeds
transformers no ``mm_token_type_ids``; the config's default (``"vision"``: image runs
attend both ways) is checked in ``test_gemma4_unified_parity.py``.
"""

from transformers import Gemma4UnifiedProcessor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import (
    Gemma4UnifiedAudioFeatureExtractor,
)
from vl_parity_cases._tiny import VideoProcessorOptional, vl_config
from vl_parity_cases.gemma4 import AUDIO as AUDIO_TOKEN
from vl_parity_cases.gemma4 import (
    BOA,
    BOI,
    EOA,
    EOI,
    IMAGE,
    NAMED_TOKENS,
    SPECIAL_TOKENS,
    VIDEO,
    ImagesByPrompt,
)
from vl_parity_cases.gemma4 import TEXT as GEMMA4_TEXT

from mobius.testing import tiny_tokenizer

PROMPTS = (
    "USER: <image_soft_token> w15 <audio_soft_token> w17 ASSISTANT:",
    "USER: w13 <audio_soft_token> w18 <image_soft_token> w12",
)
IMAGE_SIZES = ((37, 45), (29, 21))
CLIP_LENGTHS = (200, 90)
VISION = dict(
    patch_size=4, pooling_kernel_size=2, mm_embed_dim=24, output_proj_dims=24, mm_posemb_size=32
)
AUDIO = dict(audio_embed_dim=16)
# Gemma 4's tiny decoder without per-layer inputs (the unified config has none), its full
# layers k-equals-v
TEXT = {
    **{name: value for name, value in GEMMA4_TEXT.items() if "per_layer_input" not in name},
    "attention_k_eq_v": True,
    "use_bidirectional_attention": None,
}


def gemma4_unified_config(text=TEXT, **fields):
    return vl_config(
        "gemma4_unified",
        VISION,
        text,
        audio_config=dict(AUDIO),
        image_token_id=IMAGE,
        boi_token_id=BOI,
        eoi_token_id=EOI,
        audio_token_id=AUDIO_TOKEN,
        boa_token_id=BOA,
        eoa_token_index=EOA,
        video_token_id=VIDEO,
        **fields,
    )


class ImageAudioGemma4UnifiedProcessor(
    ImagesByPrompt, VideoProcessorOptional, Gemma4UnifiedProcessor
):
    """Gemma4UnifiedProcessor over images and audio (no video processor)."""


def gemma4_unified_processor(config):
    vision = config.vision_config
    side = vision.patch_size * vision.pooling_kernel_size
    image_processor = Gemma4ImageProcessorPil(
        patch_size=side, pooling_kernel_size=1, max_soft_tokens=70
    )
    frame = config.audio_config.audio_embed_dim
    return ImageAudioGemma4UnifiedProcessor(
        feature_extractor=Gemma4UnifiedAudioFeatureExtractor(
            feature_size=frame, audio_samples_per_token=frame
        ),
        image_processor=image_processor,
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, SPECIAL_TOKENS, NAMED_TOKENS),
        video_processor=None,
        image_seq_length=70,
    )


OPTIONS = dict(
    prompts=PROMPTS,
    image_sizes=IMAGE_SIZES,
    clip_lengths=CLIP_LENGTHS,
    model_class="Gemma4UnifiedForConditionalGeneration",
)
#: case -> (model_type, make_config, make_processor, options)
CASES = {
    "gemma4_unified": (
        "gemma4_unified",
        gemma4_unified_config(),
        gemma4_unified_processor,
        OPTIONS,
    ),
}
