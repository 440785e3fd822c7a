"""Janus over Llama (understanding only): its SigLIP-like tower (``projection_layer``, MLP of
``hidden * mlp_ratio``) and a two-layer aligner; then no q/k/v biases, a three-layer aligner,
a fractional ``mlp_ratio`` and an untied head. A tiny VQ-VAE (the image-generation path,
unread) keeps the random model small."""

from transformers import JanusProcessor
from transformers.models.janus.image_processing_pil_janus import JanusImageProcessorPil

from mobius.testing import tiny_tokenizer

from . import _tiny
from ._tiny import LLAMA, vl_config

IMAGE, BOI, EOI = 3, 4, 5
VISION = dict(
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
    mlp_ratio=2,
    projection_dim=_tiny.TEXT["hidden_size"],
)
VQ = dict(
    embed_dim=4,
    num_embeddings=16,
    latent_channels=32,  # GroupNorm's 32 groups
    base_channels=32,
    channel_multiplier=[1, 1],
    num_res_blocks=1,
    projection_dim=_tiny.TEXT["hidden_size"],
    image_token_embed_dim=_tiny.TEXT["hidden_size"],
)
PROMPTS = ("USER: <image_placeholder>\nw5 w7 w9 ASSISTANT:", "USER: w3 <image_placeholder> w2")


def janus_config(vision=VISION, **overrides):
    return vl_config("janus", vision, LLAMA, vq_config=dict(VQ), image_token_id=IMAGE, **overrides)


def janus_processor(config):
    vision = config.vision_config
    specials = {"<image_placeholder>": IMAGE, "<begin_of_image>": BOI, "<end_of_image>": EOI}
    names = {
        "image_token": "<image_placeholder>",
        "boi_token": "<begin_of_image>",
        "eoi_token": "<end_of_image>",
    }
    size = vision.image_size
    return JanusProcessor(
        image_processor=JanusImageProcessorPil(size={"height": size, "width": size}),
        tokenizer=tiny_tokenizer(config.text_config.vocab_size, specials, names),
        num_image_tokens=(size // vision.patch_size) ** 2,
    )


OPTIONS = dict(prompts=PROMPTS)
CASES = {
    "janus-llama": ("janus", janus_config(), janus_processor, OPTIONS),
    "janus-llama-no-qkv-bias-deep-aligner-untied": (
        "janus",
        janus_config(
            dict(VISION, attention_bias=False, depth=3, mlp_ratio=2.5, hidden_act="gelu_new"),
            tie_word_embeddings=False,
        ),
        janus_processor,
        OPTIONS,
    ),
}
