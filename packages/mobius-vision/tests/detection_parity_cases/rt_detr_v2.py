"""RT-DETR v2: its offset scale, with heads tied (the default) and untied."""

from .rt_detr import TINY_RT_DETR

CASES = {
    "rt_detr_v2": (
        "rt_detr_v2",
        dict(TINY_RT_DETR, decoder_offset_scale=0.7, initializer_range=0.3),
        dict(image_size=(64, 64)),
    ),
    "rt_detr_v2-untied-heads": (
        "rt_detr_v2",
        dict(TINY_RT_DETR, tie_word_embeddings=False, decoder_layers=3, initializer_range=0.1),
        dict(image_size=(64, 96)),
    ),
}
