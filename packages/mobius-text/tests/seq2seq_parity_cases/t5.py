"""T5 (original: tied and rescaled head, ReLU), T5 v1.1 / mT5 (gated GELU), UMT5 (a table per block)."""

T5 = dict(
    vocab_size=99,
    d_model=32,
    d_kv=8,
    d_ff=37,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,  # short enough that the prompt reaches the log buckets
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)

CASES = {
    "t5": ("t5", T5),
    "t5-gated-gelu": ("t5", dict(T5, feed_forward_proj="gated-gelu")),
    # transformers' generate sizes the cache by num_layers, so a deeper decoder
    # is checked through the step-by-step loop only.
    "t5-deeper-decoder": ("t5", dict(T5, num_decoder_layers=3), {"generate": False}),
    "mt5": ("mt5", T5),
    "umt5": ("umt5", T5),
}
