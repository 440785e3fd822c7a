"""Synthetic parity of the image-to-text (vision encoder–decoder) families against PyTorch.

Each case makes a tiny random transformers model (every parameter perturbed), builds
it with the CLI for ``--ep default`` and ``cpu``, and checks the encoder states,
the decoder's prefill and 8 cached greedy steps (max abs diff <= 1e-4), and that the
greedy tokens equal transformers' ``generate``.
"""

from __future__ import annotations

import pytest

from mobius_vision.testing import check_image_to_text_parity


def vit(hidden: int = 32):
    from transformers import ViTConfig

    return ViTConfig(
        hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=2 * hidden, image_size=32, patch_size=8,
    )  # fmt: skip


def trocr(**overrides):
    from transformers import TrOCRConfig

    fields = dict(
        vocab_size=120, d_model=32, decoder_layers=2, decoder_attention_heads=4,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2,
    )  # fmt: skip
    return TrOCRConfig(**{**fields, **overrides})


def donut_swin():
    from transformers import DonutSwinConfig

    return DonutSwinConfig(
        image_size=[32, 48], patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
        window_size=4,
    )  # fmt: skip


def bart(kind: str = "bart", **overrides):
    """A BART or mBART decoder as ``AutoModelForCausalLM`` makes it for cross-attention.

    ``encoder_layers`` equals ``decoder_layers``: ``generate`` sizes its cache by the
    config's ``num_hidden_layers``, which BART's config reads from the encoder's.
    """
    from transformers import AutoConfig

    fields = dict(
        vocab_size=120, d_model=32, decoder_layers=2, decoder_attention_heads=4,
        decoder_ffn_dim=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
        max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, is_decoder=True, add_cross_attention=True,
        forced_eos_token_id=None,  # mBART's default ends every stream: nothing left to compare
    )  # fmt: skip
    return AutoConfig.for_model(kind, **{**fields, **overrides})


def pix2struct():
    from transformers import Pix2StructConfig

    text = dict(
        vocab_size=120, hidden_size=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=16,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    vision = dict(
        hidden_size=32, patch_embed_hidden_size=48, d_ff=64, d_kv=8, num_hidden_layers=2,
        num_attention_heads=4, seq_len=16,
    )  # fmt: skip
    return Pix2StructConfig(text_config=text, vision_config=vision)


def blip():
    """BLIP captioning: BLIP's ViT (32 wide) and a BERT decoder (24 wide) cross-attending to it."""
    from transformers import BlipConfig

    vision = dict(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        image_size=16, patch_size=4,
    )  # fmt: skip
    text = dict(
        vocab_size=99, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=3, max_position_embeddings=48, bos_token_id=96, sep_token_id=97,
        pad_token_id=0, eos_token_id=98,
    )  # fmt: skip
    return BlipConfig(vision_config=vision, text_config=text)


def vision_encoder_decoder(encoder, decoder):
    from transformers import VisionEncoderDecoderConfig

    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id = decoder.decoder_start_token_id
    config.pad_token_id, config.eos_token_id = decoder.pad_token_id, decoder.eos_token_id
    return config


VED = "vision-encoder-decoder"
#: case -> (model_type, its tiny config).
CASES = {
    # TrOCR as released: the decoder's keys and values read the encoder's 48-wide states.
    "trocr": (VED, lambda: vision_encoder_decoder(vit(48), trocr(cross_attention_hidden_size=48))),
    # No cross_attention_hidden_size: enc_to_dec_proj maps 48 to 32; scaled embeddings,
    # no embedding norm, an untied head.
    "trocr-projected": (
        VED,
        lambda: vision_encoder_decoder(
            vit(48),
            trocr(scale_embedding=True, layernorm_embedding=False, tie_word_embeddings=False),
        ),
    ),
    # TrOCR-small's kind: fixed sinusoids at padding-aware positions, scaled embeddings.
    "trocr-sinusoidal": (
        VED,
        lambda: vision_encoder_decoder(
            vit(48),
            trocr(
                cross_attention_hidden_size=48,
                use_learned_position_embeddings=False,
                scale_embedding=True,
                tie_word_embeddings=False,
            ),  # fmt: skip
        ),
    ),
    # A BART decoder (post-norm) over a ViT as wide as it: no projection.
    "vit-bart": (VED, lambda: vision_encoder_decoder(vit(32), bart())),
    # Donut: a Swin encoder (its last stage 32 wide, non-square images) and an mBART
    # decoder (pre-norm, final norm, scaled embeddings) 48 wide: enc_to_dec_proj.
    "donut": (
        VED,
        lambda: vision_encoder_decoder(
            donut_swin(), bart("mbart", d_model=48, scale_embedding=True, tie_word_embeddings=False)
        ),
    ),
    # Pix2Struct: padded patch lists (the second row shorter), a T5 decoder.
    "pix2struct": ("pix2struct", pix2struct),
    # BLIP: its own generate (from [DEC], to [SEP]) and a BERT decoder's post-norm layers.
    "blip": ("blip", blip),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_image_to_text_parity(case, tmp_path):
    _model_type, make_config = CASES[case]
    results = check_image_to_text_parity(make_config(), tmp_path)
    assert [r.ep for r in results] == ["default", "cpu"]
    print({r.ep: f"{max(r.encoder_diff, r.prefill_diff, *r.decode_diffs):.1e}" for r in results})
