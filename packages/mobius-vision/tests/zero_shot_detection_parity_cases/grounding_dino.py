"""Grounding DINO and MM Grounding DINO: a BERT prompt fused with the backbone's levels, the
text-aware query selection, the box-refining decoder (the contract's grounded form,
checked by :mod:`mobius_vision.testing._grounded_detection_parity`)."""

#: d_model 32 (GroupNorm's 32 groups), one encoder and two decoder layers (the boxes refined
#: once between them), four levels (three backbone maps and an extra stride-2 one), BERT
#: with a vocabulary reaching the hard-coded delimiter ids (up to 1029).
TINY_GROUNDING_DINO = dict(
    text_config=dict(
        model_type="bert",
        vocab_size=1100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=32,
    ),
    d_model=32,
    encoder_layers=1,
    decoder_layers=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    num_queries=10,
    max_text_len=16,
    encoder_n_points=2,
    decoder_n_points=2,
)
#: The hub's backbone family (Swin, built for any image size), four one-block stages.
TINY_SWIN = dict(
    model_type="swin",
    patch_size=4,
    embed_dim=8,
    depths=[1, 1, 1, 1],
    num_heads=[1, 1, 2, 2],
    window_size=2,
    out_features=["stage2", "stage3", "stage4"],
)
#: ResNet through the registry (transformers' ResNetBackbone, frozen BatchNorms).
TINY_RESNET = dict(
    model_type="resnet",
    embedding_size=8,
    hidden_sizes=[8, 16, 16, 32],
    depths=[1, 1, 1, 1],
    layer_type="basic",
    out_features=["stage2", "stage3", "stage4"],
)

#: The Swin case checks both execution providers' builds; the others the default one.
CASES = {
    # 60 x 52 pixels: not a multiple of the patch, the windows or the merges
    "grounding-dino-swin": (
        "grounding-dino",
        dict(TINY_GROUNDING_DINO, backbone_config=TINY_SWIN),
        dict(grounded=dict(image_size=(60, 52))),
    ),
    "grounding-dino-resnet": (
        "grounding-dino",
        dict(TINY_GROUNDING_DINO, backbone_config=TINY_RESNET),
        dict(grounded=dict(image_size=(64, 48)), eps=("default",)),
    ),
    # the biased, scaled class heads, each decoder layer with its own
    "mm-grounding-dino": (
        "mm-grounding-dino",
        dict(
            TINY_GROUNDING_DINO,
            backbone_config=TINY_SWIN,
            decoder_bbox_embed_share=False,
            decoder_cls_embed_share=False,
        ),
        dict(grounded=dict(image_size=(64, 64)), eps=("default",)),
    ),
}
