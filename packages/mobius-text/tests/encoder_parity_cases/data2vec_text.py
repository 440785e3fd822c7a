"""data2vec-text: RoBERTa under the data2vec_text prefix."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "data2vec-text": ("data2vec-text", dict(type_vocab_size=1, pad_token_id=1)),
    "data2vec-text-two-types-untied": (
        "data2vec-text",
        dict(type_vocab_size=2, tie_word_embeddings=False),
        {"heads": ("masked-lm", "sentence-embedding")},
    ),
    "data2vec-text-answers-choices": (
        "data2vec-text",
        dict(type_vocab_size=1, pad_token_id=1),
        SPAN_AND_CHOICE,
    ),
}
