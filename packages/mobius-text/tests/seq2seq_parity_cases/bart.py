"""BART: post-norm layers, learned positions offset by 2, embedding LayerNorm, final_logits_bias."""

BART = dict(
    vocab_size=99,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    forced_eos_token_id=None,  # a generate() logits processor, not the model
)

CASES = {
    "bart": ("bart", BART),
    "bart-scaled-untied-relu": (
        "bart",
        dict(
            BART,
            scale_embedding=True,
            tie_word_embeddings=False,
            activation_function="relu",
            decoder_attention_heads=2,
            decoder_layers=3,
            encoder_layers=1,
        ),
        {"generate": False},
    ),
}
