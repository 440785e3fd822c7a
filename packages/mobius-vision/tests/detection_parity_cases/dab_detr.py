"""DAB-DETR: anchor boxes refined per layer (the tied box head), per-axis sine temperatures,
PReLU, conditional cross-attention (keep_query_pos), the encoder's final norm."""

from ._tiny import TINY_DETR

#: DETR's tiny sizes; DAB-DETR names d_model hidden_size, and two decoder layers move the anchors.
DAB_DETR = dict(
    {k: v for k, v in TINY_DETR.items() if k != "d_model"},
    hidden_size=TINY_DETR["d_model"],
    decoder_layers=2,
)

CASES = {
    "dab-detr": ("dab-detr", DAB_DETR),
    "dab-detr-3-layers-keep-query-pos-norm-before-relu": (
        "dab-detr",
        dict(
            DAB_DETR,
            decoder_layers=3,
            keep_query_pos=True,
            normalize_before=True,
            activation_function="relu",
            temperature_height=30,
            temperature_width=10,
        ),
        dict(image_size=(40, 60)),
    ),
}
