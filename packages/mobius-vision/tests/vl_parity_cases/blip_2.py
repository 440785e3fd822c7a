"""BLIP-2 over OPT: BLIP's tower, a Q-Former (cross-attention every layer, then every other
one), ``num_query_tokens`` image tokens before each prompt."""

from transformers import Blip2Processor
from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import TOWER, vl_config

IMAGE_TOKEN_ID = 3
NUM_QUERY_TOKENS = 5
VISION = dict(TOWER, model_type="blip_2_vision_model", num_hidden_layers=2)
QFORMER = dict(
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=2,
    vocab_size=40,
    max_position_embeddings=32,
)
OPT = dict(
    model_type="opt",
    hidden_size=32,
    ffn_dim=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=96,
    max_position_embeddings=64,
    word_embed_proj_dim=32,
)
#: BLIP-2's processor puts the image tokens in front itself: the prompts hold none.
PROMPTS = ("Question: w5 w7 w9 Answer:", "w3 w2 Answer: w4")


def blip_config(model_type: str, qformer: dict, **fields):
    return vl_config(
        model_type,
        VISION,
        OPT,
        qformer_config=dict(qformer),
        num_query_tokens=NUM_QUERY_TOKENS,
        image_token_index=IMAGE_TOKEN_ID,
        **fields,
    )


def image_processor(config):
    size = config.vision_config.image_size
    return BlipImageProcessorPil(size={"height": size, "width": size})


def blip_2_processor(config):
    return Blip2Processor(
        image_processor=image_processor(config),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, {"<image>": IMAGE_TOKEN_ID}),
        num_query_tokens=config.num_query_tokens,
    )


#: transformers' BLIP-2 forward wants the images on every call; its generate decodes
#: with the language model alone, as the parity kit then does.
OPTIONS = dict(prompts=PROMPTS, decode_model=lambda model: model.language_model)

CASES = {
    "blip-2-opt": ("blip-2", blip_config("blip-2", QFORMER), blip_2_processor, OPTIONS),
    "blip-2-opt-cross-every-other-layer": (
        "blip-2",
        blip_config("blip-2", dict(QFORMER, num_hidden_layers=3, cross_attention_frequency=2)),
        blip_2_processor,
        OPTIONS,
    ),
}
