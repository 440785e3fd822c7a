"""OWL-ViT and OWLv2: CLIP's towers, the patch class head against each query, the box head
(OWLv2 adds its objectness head)."""

#: Both towers at hidden 32 (the text width is the projection's: the class head maps the
#: image patches to it), two layers, 32 px images in 8 px patches (a 4 x 4 grid).
TINY_OWL = dict(
    text_config=dict(
        vocab_size=99,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=16,
        bos_token_id=97,
        eos_token_id=98,
    ),
    vision_config=dict(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
    ),
    projection_dim=32,
)

CASES = {
    "owlvit": ("owlvit", TINY_OWL),
}
CASES["owlv2"] = ("owlv2", TINY_OWL)
#: A vision tower wider than the text tower (48 against 32): the class head's widths apart.
CASES["owlvit-wider-vision"] = (
    "owlvit",
    dict(TINY_OWL, vision_config=dict(TINY_OWL["vision_config"], hidden_size=48)),
)
