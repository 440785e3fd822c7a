"""BEiT and Data2Vec-Vision semantic segmentation: own, shared and absolute position tables,
layer scale on and off, an uneven pooling pyramid on the 4x4 last map."""

BEIT = dict(
    image_size=32,
    patch_size=4,
    hidden_size=16,
    num_hidden_layers=4,
    num_attention_heads=2,
    intermediate_size=32,
    out_indices=[1, 2, 3, 4],
    pool_scales=[1, 2, 3, 6],
    use_auxiliary_head=False,
    num_labels=4,
    initializer_range=0.5,
)

CASES = {
    "beit-segmentation-relative-bias": (
        "beit",
        dict(BEIT, use_relative_position_bias=True, num_hidden_layers=5, out_indices=[1, 2, 4, 5]),
        dict(image_size=(32, 32), model_class="BeitForSemanticSegmentation"),
    ),
    "beit-segmentation-absolute-positions-auxiliary-head-no-layer-scale": (
        "beit",
        dict(
            BEIT,
            use_absolute_position_embeddings=True,
            use_auxiliary_head=True,
            auxiliary_channels=8,
            layer_scale_init_value=0.0,
            use_mean_pooling=False,
        ),
        dict(image_size=(32, 32), model_class="BeitForSemanticSegmentation"),
    ),
    "data2vec-vision-segmentation-shared-bias": (
        "data2vec-vision",
        dict(BEIT, use_shared_relative_position_bias=True, pool_scales=[1, 3]),
        dict(image_size=(32, 32), model_class="Data2VecVisionForSemanticSegmentation"),
    ),
}
