"""Text-only causal LMs of vision–language checkpoints: the tiny wrapper
(``*ForConditionalGeneration``, towers included) is saved, built with
``--model-type <Class>``, and compared with transformers' ``<Class>`` loaded from it."""

from text_parity_cases import TINY
from text_parity_cases.dots3_note_text import DOTS
from text_parity_cases.llama4 import LLAMA4
from text_parity_cases.qwen3_5 import LINEAR

QWEN_VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=32,
    num_heads=2,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=9,
    out_hidden_size=TINY["hidden_size"],
)
QWEN3_5_MOE = dict(
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
)
LLAMA4_VISION = dict(
    hidden_size=16,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
    vision_output_dim=32,
    projector_input_dim=32,
    projector_output_dim=32,
)
DOTS_TOWERS = dict(
    vision_config=dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        patch_size=4,
        mlp_layer_types=["dense"],
        adapter_in_dim=16,
        adapter_out_dim=TINY["hidden_size"],
    ),
    audio_config=dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        downsample_hidden_size=8,
        adapter_input_size=16,
        adapter_out_dim=TINY["hidden_size"],
        feature_size=16,
        max_position_embeddings=64,
    ),
    image_token_id=120,
    video_token_id=121,
    audio_token_id=122,
)

# the image tokenizer: one down block of 32 channels (GroupNorm's 32 groups), 16 codes
EMU3_VQ = dict(
    codebook_size=16,
    embed_dim=4,
    latent_channels=4,
    base_channels=32,
    channel_multiplier=[1],
    num_res_blocks=1,
    attn_resolutions=[],
    hidden_size=8,
    num_attention_heads=1,
)
MLLAMA_VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=1,
    num_global_layers=1,
    attention_heads=2,
    image_size=16,
    patch_size=4,
    max_num_tiles=2,
    supported_aspect_ratios=[[1, 1], [1, 2]],
    intermediate_layers_indices=[0],
    vision_output_dim=64,
)


def wrapper(model_class: str, source_class: str) -> dict:
    return {"model_class": model_class, "source_class": source_class}


CASES = {
    "qwen3_5-text-only": (
        "qwen3_5",
        dict(text_config=dict(TINY, **LINEAR), vision_config=QWEN_VISION),
        wrapper("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
    ),
    # the wrapper ties its head (no lm_head.weight saved) while its text config does not:
    # transformers' Qwen3_5ForCausalLM then misses the head, so the wrapper is the reference
    "qwen3_5-text-only-tied": (
        "qwen3_5",
        dict(
            text_config=dict(TINY, **LINEAR, attention_bias=True),
            vision_config=QWEN_VISION,
            tie_word_embeddings=True,
        ),
        wrapper("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
    ),
    "qwen3_5_moe-text-only": (
        "qwen3_5_moe",
        dict(text_config=dict(TINY, **LINEAR, **QWEN3_5_MOE), vision_config=QWEN_VISION),
        wrapper("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
    ),
    "llama4-text-only": (
        "llama4",
        dict(
            text_config=dict(TINY, **LLAMA4, interleave_moe_layer_step=2),
            vision_config=LLAMA4_VISION,
        ),
        wrapper("Llama4ForCausalLM", "Llama4ForConditionalGeneration"),
    ),
    "dots3_note-text-only": (
        "dots3_note",
        dict(text_config=dict(TINY, **DOTS), **DOTS_TOWERS),
        wrapper("Dots3NoteForCausalLM", "Dots3NoteForConditionalGeneration"),
    ),
    # transformers' Emu3ForCausalLM misses every weight of the wrapper's checkpoint (5.24):
    # the reference is the wrapper on text alone
    "emu3-text-only": (
        "emu3",
        dict(
            text_config=dict(TINY, bos_token_id=1, eos_token_id=2),
            vq_config=EMU3_VQ,
            vocabulary_map={"<image>": 120},
        ),
        wrapper("Emu3ForCausalLM", "Emu3ForConditionalGeneration"),
    ),
    # 4 layers, cross-attention at 1 and 3 (skipped on text); the embedding has 8 more rows
    "mllama-text-only": (
        "mllama",
        dict(
            text_config=dict(
                TINY,
                num_hidden_layers=4,
                cross_attention_layers=[1, 3],
                pad_token_id=None,
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 10000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 16,
                },
            ),
            vision_config=MLLAMA_VISION,
            image_token_index=130,
        ),
        wrapper("MllamaForCausalLM", "MllamaForConditionalGeneration"),
    ),
}
