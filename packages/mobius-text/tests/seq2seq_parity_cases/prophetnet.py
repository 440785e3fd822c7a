"""ProphetNet: an ngram decoder (main + predict streams, bucketed relative biases); the logits
are predict stream 0's. Buckets small enough that the short sequences reach the log range."""

PROPHETNET = dict(
    vocab_size=99,
    hidden_size=32,
    num_encoder_layers=2,
    num_decoder_layers=2,
    num_encoder_attention_heads=4,
    num_decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
    ngram=2,
    num_buckets=8,
    relative_max_distance=16,
)

CASES = {
    "prophetnet": ("prophetnet", PROPHETNET),
    # three predict streams, untied head, relu, other head counts and buckets (equal depths:
    # generate() sizes the cache by the encoder's)
    "prophetnet-ngram3-untied-relu": (
        "prophetnet",
        dict(
            PROPHETNET,
            ngram=3,
            tie_word_embeddings=False,
            activation_function="relu",
            num_encoder_attention_heads=2,
            num_buckets=6,
            relative_max_distance=10,
        ),
    ),
}
