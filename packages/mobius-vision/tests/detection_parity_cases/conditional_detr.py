"""Conditional DETR: reference points, conditional cross-attention (the first layer's
position terms, query_scale from the second), sigmoid classes, box offsets."""

from ._tiny import TINY_DETR

CASES = {
    "conditional_detr": ("conditional_detr", dict(TINY_DETR, decoder_layers=2)),
    "conditional_detr-one-decoder-layer-learned-positions": (
        "conditional_detr",
        dict(TINY_DETR, position_embedding_type="learned", decoder_attention_heads=4),
        dict(image_size=(56, 40)),
    ),
}
