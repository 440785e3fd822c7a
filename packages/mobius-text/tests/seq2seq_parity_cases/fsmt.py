"""FSMT: fairseq's WMT19 layout (post-norm, scaled embeddings, no embedding norm), separate
source and target vocabularies, fairseq's padding-aware sinusoid positions (the table is in the
checkpoint, so perturbed here), the decoder's own ``output_projection``."""

FSMT = dict(
    langs=["en", "de"],
    src_vocab_size=99,
    tgt_vocab_size=77,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
    forced_eos_token_id=None,  # a generate() logits processor, not the model
    num_beams=1,  # FSMT's generate() defaults to beam search; the check is greedy
)
# transformers' FSMT decoder drops its causal mask when it has a cache (fairseq's incremental
# decoding never feeds two tokens at once): a two-token prefill would see the second token from
# the first. The graph is causal, as fairseq trains it; decoding starts from the start token alone.
ONE_TOKEN = {"prefill": 1}

CASES = {
    "fsmt": ("fsmt", FSMT, ONE_TOKEN),
    "fsmt-tied-gelu": (
        "fsmt",
        dict(
            FSMT,
            src_vocab_size=77,
            tie_word_embeddings=True,
            activation_function="gelu",
            scale_embedding=False,
            pad_token_id=3,
        ),
        ONE_TOKEN,
    ),
}
