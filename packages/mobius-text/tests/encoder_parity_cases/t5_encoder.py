"""T5's encoder alone (``T5EncoderModel``, ``UMT5EncoderModel``): a diffusion pipeline's text encoder.

The checkpoint's ``model_type`` is ``t5``/``umt5``; its architecture class picks
the encoder-only build. Few buckets and a short max distance, so the padded batch
reaches the logarithmic buckets.
"""

T5 = dict(
    d_kv=8,
    d_ff=37,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=16,
)
HEADS = ("none", "sentence-embedding")

CASES = {
    "t5-encoder": ("t5", T5, dict(heads=HEADS, model_class="T5EncoderModel")),
    "t5-encoder-gated-gelu": (
        "t5",
        dict(T5, feed_forward_proj="gated-gelu"),
        dict(heads=("none",), model_class="T5EncoderModel"),
    ),
    "t5-token-classification": (
        "t5",
        dict(T5, num_labels=3),
        dict(heads=("token-classification",), model_class="T5ForTokenClassification"),
    ),
    "umt5-token-classification": (
        "umt5",
        dict(T5, feed_forward_proj="gated-gelu", num_labels=3),
        dict(heads=("token-classification",), model_class="UMT5ForTokenClassification"),
    ),
    "umt5-encoder": (
        "umt5",
        dict(T5, feed_forward_proj="gated-gelu"),
        dict(heads=("none",), model_class="UMT5EncoderModel"),
    ),
}
