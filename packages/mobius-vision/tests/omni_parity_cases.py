"""Qwen2.5-Omni's and Qwen3-Omni's tiny cases: each thinker alone, and a whole checkpoint
(the thinker inside, the speech output left out of the config).

The processor is the real ``Qwen2_5OmniProcessor`` (``Qwen3OmniMoeProcessor``) over the
Qwen2-VL PIL image processor, a Whisper feature extractor of 16 mel bins and 2 s windows
(what Qwen2.5-Omni's processor pads every clip to: 200 frames; Qwen3-Omni's pads to the
longest clip), and a tiny tokenizer with the Omni special tokens. For Qwen2.5-Omni,
with ``n_window`` 8 a chunk is 16 frames: the 1 s clip (100 frames) makes six
whole chunks and a short one, the 0.44 s clip (44 frames) two and a short one; its
audio tokens are ``((frames - 1) // 2 + 1) // 2`` (25 and 11). Images are cut as in
the Qwen2.5-VL case (4-pixel patches, merge 2, windows of 2x2 merge blocks; two blocks
here, the second of full attention); the decoder is the Qwen2-VL case's.
"""

from transformers import AutoConfig, WhisperFeatureExtractor
from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import Qwen3OmniMoeProcessor
from vl_parity_cases._tiny import VideoProcessorOptional
from vl_parity_cases.qwen2_5_vl import VISION as QWEN2_5_VL_VISION
from vl_parity_cases.qwen2_vl import TEXT
from vl_parity_cases.qwen3_vl import MOE_TEXT
from vl_parity_cases.qwen3_vl import VISION as QWEN3_VL_VISION

from mobius.testing import tiny_tokenizer

IMAGE, VISION_START, VISION_END, VIDEO, AUDIO, AUDIO_START, AUDIO_END = 3, 4, 5, 6, 7, 8, 9
#: The special tokens, by the attribute names the processor reads them under.
NAMED = {
    "image_token": ("<|IMAGE|>", IMAGE),
    "vision_bos_token": ("<|vision_bos|>", VISION_START),
    "vision_eos_token": ("<|vision_eos|>", VISION_END),
    "video_token": ("<|VIDEO|>", VIDEO),
    "audio_token": ("<|AUDIO|>", AUDIO),
    "audio_bos_token": ("<|audio_bos|>", AUDIO_START),
    "audio_eos_token": ("<|audio_eos|>", AUDIO_END),
}
IMG = "<|vision_bos|> <|IMAGE|> <|vision_eos|>"
AUD = "<|audio_bos|> <|AUDIO|> <|audio_eos|>"
PROMPTS = (f"USER: {IMG} w11 {AUD} w7 ASSISTANT:", f"USER: w8 {AUD} w2 {IMG} ASSISTANT: w10")
IMAGE_SIZES = ((37, 45), (29, 21))
CLIP_LENGTHS = (16000, 7000)
VISION = dict(QWEN2_5_VL_VISION, depth=2)
AUDIO_CONFIG = dict(
    num_mel_bins=16,
    encoder_layers=2,
    encoder_attention_heads=2,
    encoder_ffn_dim=32,
    d_model=16,
    n_window=8,
    max_source_positions=64,
)


def thinker_config(model_type="qwen2_5_omni_thinker", vision=VISION, audio=AUDIO_CONFIG, text=TEXT):
    """A thinker's transformers config (``qwen2_5_omni_thinker``...)."""
    width = text["hidden_size"]
    # Qwen2.5-Omni's config names the placeholders' ids *_token_index, Qwen3-Omni's *_token_id
    suffix = "_token_id" if model_type.startswith("qwen3") else "_token_index"
    fields = dict(
        vision_config=dict(vision, out_hidden_size=width),
        audio_config=dict(audio, output_dim=width),
        text_config=dict(text),
        **{f"image{suffix}": IMAGE, f"video{suffix}": VIDEO, f"audio{suffix}": AUDIO},
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        audio_start_token_id=AUDIO_START,
        audio_end_token_id=AUDIO_END,
    )
    return AutoConfig.for_model(model_type, **fields)


def omni_config():
    """A whole checkpoint's config (``qwen2_5_omni``) over the thinker's, without the talker
    and token2wav (whose weights the build ignores: a tiny vocoder takes long to make)."""
    return AutoConfig.for_model(
        "qwen2_5_omni", thinker_config=thinker_config().to_dict(), enable_audio_output=False
    )


# Qwen3-Omni: transformers counts 13 tokens per whole chunk, so n_window stays 50 (100-frame
# chunks); windows of two chunks (n_window_infer 200) cut the 3.2 s clip (320 frames: three
# whole chunks and 20 frames) in two. The tower and MoE decoder are the Qwen3-VL-MoE case's.
QWEN3_AUDIO = dict(
    AUDIO_CONFIG, n_window=50, n_window_infer=200, downsample_hidden_size=8, max_source_positions=32
)
QWEN3_CLIP_LENGTHS = (51200, 11200)


def qwen3_thinker_config():
    """Qwen3-Omni's thinker (``qwen3_omni_moe_thinker``)."""
    return thinker_config("qwen3_omni_moe_thinker", QWEN3_VL_VISION, QWEN3_AUDIO, MOE_TEXT)


def qwen3_omni_config():
    """A whole Qwen3-Omni checkpoint's config, without the talker and code2wav."""
    thinker = qwen3_thinker_config().to_dict()
    return AutoConfig.for_model("qwen3_omni_moe", thinker_config=thinker, enable_audio_output=False)


class ImageAudioOmniProcessor(VideoProcessorOptional, Qwen2_5OmniProcessor):
    """Qwen2_5OmniProcessor over images and audio (no video processor)."""


class ImageAudioQwen3OmniProcessor(VideoProcessorOptional, Qwen3OmniMoeProcessor):
    """Qwen3OmniMoeProcessor over images and audio clips (no video processor)."""


def omni_processor(config=None, processor_class=ImageAudioOmniProcessor):
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=16 * 16,
        max_pixels=48 * 48,
        patch_size=VISION["patch_size"],
        temporal_patch_size=VISION["temporal_patch_size"],
        merge_size=VISION["spatial_merge_size"],
    )
    feature_extractor = WhisperFeatureExtractor(
        feature_size=AUDIO_CONFIG["num_mel_bins"], chunk_length=2
    )
    specials = dict(NAMED.values())
    named = {attribute: token for attribute, (token, _) in NAMED.items()}
    tokenizer = tiny_tokenizer(TEXT["vocab_size"], specials, named)
    return processor_class(
        image_processor=image_processor, feature_extractor=feature_extractor, tokenizer=tokenizer
    )


def qwen3_omni_processor(config=None):
    return omni_processor(config, ImageAudioQwen3OmniProcessor)


def rope_positions(model, inputs):
    """The thinker's own 3-D rope indices and deltas for the processor's ``inputs``."""
    import torch

    positions, deltas = model.model.get_rope_index(
        torch.from_numpy(inputs["input_ids"]),
        image_grid_thw=torch.from_numpy(inputs["image_grid_thw"]),
        attention_mask=torch.from_numpy(inputs["attention_mask"]),
        audio_seqlens=torch.from_numpy(inputs["feature_attention_mask"].sum(-1)),
    )
    return positions.numpy(), deltas.numpy()


OPTIONS = dict(
    prompts=PROMPTS,
    image_sizes=IMAGE_SIZES,
    clip_lengths=CLIP_LENGTHS,
    rope_positions=rope_positions,
)
#: case -> (model_type, make_config, make_processor, options)
CASES = {
    "qwen2_5_omni_thinker": (
        "qwen2_5_omni_thinker",
        thinker_config,
        omni_processor,
        dict(OPTIONS, model_class="Qwen2_5OmniThinkerForConditionalGeneration"),
    ),
    "qwen2_5_omni": (
        "qwen2_5_omni",
        omni_config,
        omni_processor,
        dict(
            OPTIONS,
            model_class="Qwen2_5OmniForConditionalGeneration",
            reference_part="thinker",
        ),
    ),
    "qwen3_omni_moe_thinker": (
        "qwen3_omni_moe_thinker",
        qwen3_thinker_config,
        qwen3_omni_processor,
        dict(
            OPTIONS,
            clip_lengths=QWEN3_CLIP_LENGTHS,
            model_class="Qwen3OmniMoeThinkerForConditionalGeneration",
        ),
    ),
    "qwen3_omni_moe": (
        "qwen3_omni_moe",
        qwen3_omni_config,
        qwen3_omni_processor,
        dict(
            OPTIONS,
            clip_lengths=QWEN3_CLIP_LENGTHS,
            model_class="Qwen3OmniMoeForConditionalGeneration",
            reference_part="thinker",
        ),
    ),
}
