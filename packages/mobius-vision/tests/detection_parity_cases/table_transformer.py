"""Table Transformer: DETR's layers pre-normed, with the encoder's final LayerNorm."""

from ._tiny import TINY_DETR

CASES = {
    "table-transformer": ("table-transformer", dict(TINY_DETR, encoder_layers=2)),
    "table-transformer-learned-positions": (
        "table-transformer",
        dict(TINY_DETR, position_embedding_type="learned", decoder_layers=2),
        dict(image_size=(40, 72)),
    ),
}
