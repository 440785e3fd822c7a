"""CLIPSeg: CLIP's towers, the FiLM-conditioned decoder over extracted vision layers and its
transposed-convolution upsampler."""

#: Towers at hidden 32 with three vision layers (two extracted, the last one unread), 32 px
#: images in 8 px patches (a 4 x 4 position table), a decoder of width 16.
TINY_CLIPSEG = dict(
    text_config=dict(
        vocab_size=99,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=16,
        bos_token_id=97,
        eos_token_id=98,
    ),
    vision_config=dict(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=3,
        num_attention_heads=4,
    ),
    projection_dim=24,
    extract_layers=[0, 1],
    reduce_dim=16,
    decoder_num_attention_heads=2,
    decoder_intermediate_size=20,
)

CASES = {
    # 48 px input: the position table resized from 4 x 4 to 6 x 6 patches, as the hub's
    # checkpoints run 352 px images on a 224 px table.
    "clipseg": ("clipseg", TINY_CLIPSEG, dict(image_size=(48, 48))),
    # The refined checkpoints' upsampler (a 3x3 conv, two transposed convs) at the table's
    # own size, the prompt applied at the second decoder layer.
    "clipseg-complex-upsampler": (
        "clipseg",
        dict(TINY_CLIPSEG, use_complex_transposed_convolution=True, conditional_layer=1),
    ),
}
