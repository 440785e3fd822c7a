"""Kosmos-2: CLIP's tower, 5 latent queries, the image placed by ``image_embeds_position_mask``
over ordinary ids; a batch of two prompts of different lengths (left padding), positions
counted from ``pad_token_id + 1`` as transformers' Kosmos-2 counts them."""

from transformers import AutoConfig, Kosmos2Processor
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

from mobius.testing import tiny_tokenizer

from ._tiny import CLIP

LATENT_QUERIES = 5
PATCH_INDEX_TOKENS = 8
#: XLM-R's special ids, as Kosmos-2's tokenizer has them (``<unk>`` takes 3, so the image
#: positions hold ids 4..8).
SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2}
TEXT = dict(
    model_type="kosmos_2_text_model",
    embed_dim=32,
    ffn_dim=48,
    layers=2,
    attention_heads=4,
    vocab_size=128,  # the tiny vocabulary, then the processor's tag and patch-index tokens
    max_position_embeddings=64,
    layer_norm_eps=1e-5,
    activation_function="gelu",
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)
#: Kosmos-2's processor puts the image in front itself: the prompts hold no placeholder.
PROMPTS = ("w10 w12 w14 w16", "<grounding> w20 w22")


def kosmos2_config():
    return AutoConfig.for_model(
        "kosmos-2",
        vision_config=dict(CLIP, model_type="kosmos_2_vision_model", num_hidden_layers=2),
        text_config=dict(TEXT),
        latent_query_num=LATENT_QUERIES,
    )


def kosmos2_tokenizer(vocab_size: int):
    tokenizer = tiny_tokenizer(vocab_size, SPECIALS)
    tokenizer.bos_token, tokenizer.eos_token = "<s>", "</s>"
    return tokenizer


def kosmos2_processor(config):
    size = config.vision_config.image_size
    processor = Kosmos2Processor(
        CLIPImageProcessorPil(
            size={"shortest_edge": size}, crop_size={"height": size, "width": size}
        ),
        kosmos2_tokenizer(96),
        num_patch_index_tokens=PATCH_INDEX_TOKENS,
    )
    processor.num_image_tokens = config.latent_query_num  # the processor's default is 64
    return processor


CASES = {
    "kosmos-2": (
        "kosmos-2",
        kosmos2_config,
        kosmos2_processor,
        dict(
            prompts=PROMPTS,
            first_position=SPECIALS["<pad>"] + 1,
            # transformers' forward wants the pixels on every call; its generate decodes
            # with the text model alone, as the kit then does
            decode_model=lambda model: model.text_model,
        ),
    ),
}
