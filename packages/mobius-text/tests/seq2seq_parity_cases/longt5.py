"""LongT5: blocked local encoder attention, and transient global tokens; sources several blocks long."""

LONGT5 = dict(
    vocab_size=99,
    d_model=32,
    d_kv=8,
    d_ff=37,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    local_radius=3,  # blocks of 4: a 23-token source is 6 blocks, the padded row ends mid-block
    global_block_size=4,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)
LONG = {"lengths": (23, 9)}
TGLOBAL = dict(LONGT5, encoder_attention_type="transient-global")

CASES = {
    "longt5-local": ("longt5", LONGT5, LONG),
    "longt5-local-gated": ("longt5", dict(LONGT5, feed_forward_proj="gated-gelu"), LONG),
    "longt5-tglobal": ("longt5", TGLOBAL, LONG),
    # a partial last global block joins the one before; 3 of 5 globals are real in row 2
    "longt5-tglobal-blocks3": (
        "longt5",
        dict(TGLOBAL, global_block_size=3, local_radius=4),
        {"lengths": (17, 11)},
    ),
    # shorter than one global block: no global tokens at all
    "longt5-tglobal-no-globals": (
        "longt5",
        dict(TGLOBAL, global_block_size=16),
        {"lengths": (7, 4)},
    ),
}
