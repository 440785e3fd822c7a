"""Gemma 3n's tiny case on the audio-vision-language kit, through the real ``Gemma3nProcessor``
(SigLIP's PIL image processor, the numpy ``Gemma3nAudioFeatureExtractor`` at 16 mel bins).

timm's MobileNet-V5 tower (scaled down by ``model_args``, pooled 4x4 -> 2x2), the conformer
audio tower (chunks of 4 frames shorter than its left context of 5, logits capped at 2 so the
cap bites) and the multimodal embedders into the Gemma 3n text decoder (AltUp, per-layer
inputs, a shared-KV layer, a window shorter than the prompts). Each prompt of the batch
holds an image and a clip: 6400 samples (37 mel frames: 3 audio tokens) and 2600 (17 frames,
padded to 37: 2 real tokens of the 3), each clip's tokens then padded to the audio block's 5
with the padding token's embedding (both of transformers' paddings are exercised).

The vocabulary is laid out as the hub's: text ids below the per-layer table's 96, then the
vision range (the end-of-image token 96 embeds through ``embed_vision``'s table), then the
audio range. transformers builds the tower with timm, so the case needs timm (and the
torchvision timm imports).
"""

import pytest
from transformers import AutoConfig, Gemma3nProcessor
from transformers.models.gemma3n.feature_extraction_gemma3n import Gemma3nAudioFeatureExtractor
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from mobius.testing import tiny_tokenizer

IMAGE_SIZE = 64  # stages at 1/16 and 1/32: 4x4 and 2x2, fused on 4x4, pooled to 2x2
VISION_OFFSET, AUDIO_OFFSET, VOCAB = 96, 112, 128
IMAGE, BOI, EOI = 98, 5, VISION_OFFSET
AUDIO, BOA, EOA = 113, 6, AUDIO_OFFSET
TEXT = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=VOCAB,
    vocab_size_per_layer_input=VISION_OFFSET,
    hidden_size_per_layer_input=8,
    laurel_rank=4,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    sliding_window=8,
    num_kv_shared_layers=1,
    activation_sparsity_pattern=[0.95, 0.0, 0.0],
    max_position_embeddings=256,
    final_logit_softcapping=30.0,
)
VISION = dict(
    model_args={"channel_multiplier": 0.125, "msfa_output_resolution": 2},
    vocab_offset=VISION_OFFSET,
    vocab_size=AUDIO_OFFSET - VISION_OFFSET,
)
AUDIO_CONFIG = dict(
    vocab_offset=AUDIO_OFFSET,
    vocab_size=VOCAB - AUDIO_OFFSET,
    hidden_size=16,
    input_feat_size=16,
    conf_num_hidden_layers=1,
    conf_num_attention_heads=2,
    sscp_conv_channel_size=[8, 4],
    conf_attention_chunk_size=4,
    conf_attention_context_left=5,
    conf_attention_logit_cap=2.0,
)
AUDIO_TOKENS = 5  # per clip: the processor's audio block
PROMPTS = (
    "USER: <image_soft_token> w5 <audio_soft_token> w7 w9 ASSISTANT:",
    "USER: w3 <audio_soft_token> w11 <image_soft_token> w2",
)


def gemma3n_config():
    """The case's config, for a transformers model: skips without timm."""
    pytest.importorskip("timm", reason="transformers builds Gemma 3n's vision tower with timm")
    return gemma3n_hf_config()


def gemma3n_hf_config():
    """The case's config alone (mobius builds from it without timm)."""
    return AutoConfig.for_model(
        "gemma3n",
        text_config=dict(TEXT),
        vision_config=dict(VISION),
        audio_config=dict(AUDIO_CONFIG),
        vision_soft_tokens_per_image=4,
        audio_soft_tokens_per_image=AUDIO_TOKENS,
        image_token_id=IMAGE,
        boi_token_id=BOI,
        eoi_token_id=EOI,
        audio_token_id=AUDIO,
        boa_token_id=BOA,
        eoa_token_id=EOA,
    )


def gemma3n_processor(config):
    specials = {
        "<image_soft_token>": IMAGE,
        "<start_of_image>": BOI,
        "<end_of_image>": EOI,
        "<audio_soft_token>": AUDIO,
        "<start_of_audio>": BOA,
        "<end_of_audio>": EOA,
    }
    names = {
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "eoa_token": "<end_of_audio>",
    }
    return Gemma3nProcessor(
        feature_extractor=Gemma3nAudioFeatureExtractor(
            feature_size=AUDIO_CONFIG["input_feat_size"]
        ),
        image_processor=SiglipImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, specials, names),
        image_seq_length=config.vision_soft_tokens_per_image,
        audio_seq_length=config.audio_soft_tokens_per_image,
    )


IMAGE_SIZES = ((37, 45), (29, 21))
OPTIONS = dict(
    prompts=PROMPTS,
    image_sizes=IMAGE_SIZES,
    clip_lengths=(6400, 2600),
    model_class="Gemma3nForConditionalGeneration",
)
#: case -> (model_type, make_config, make_processor, options)
CASES = {"gemma3n": ("gemma3n", gemma3n_config, gemma3n_processor, OPTIONS)}
