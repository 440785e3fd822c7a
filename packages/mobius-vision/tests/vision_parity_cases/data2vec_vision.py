"""Data2Vec-Vision: BEiT with no pooler on the bare model."""

from vision_parity_cases.beit import BEIT

CASES = {
    "data2vec-vision": ("data2vec-vision", BEIT),
    "data2vec-vision-relative-and-shared-bias-absolute-positions": (
        "data2vec-vision",
        dict(
            BEIT,
            use_relative_position_bias=True,
            use_shared_relative_position_bias=True,
            use_absolute_position_embeddings=True,
        ),
    ),
    "data2vec-vision-no-layer-scale-cls-pooling-wide": (
        "data2vec-vision",
        dict(BEIT, layer_scale_init_value=0.0, use_mean_pooling=False, image_size=[24, 40]),
    ),
}
