"""data2vec-text: RoBERTa under the data2vec_text prefix."""

CASES = {
    "data2vec-text": ("data2vec-text", dict(type_vocab_size=1, pad_token_id=1)),
    "data2vec-text-two-types-untied": (
        "data2vec-text",
        dict(type_vocab_size=2, tie_word_embeddings=False),
        {"heads": ("masked-lm", "sentence-embedding")},
    ),
}
