"""BigBird, full attention only: BERT's layers, an unread pooler, RoFormer-style classifier."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "big_bird": ("big_bird", dict(attention_type="original_full", type_vocab_size=2)),
    # no q/k/v bias, word embeddings scaled by sqrt(hidden), untied decoder, relu
    "big_bird-unbiased-rescaled-untied": (
        "big_bird",
        dict(
            attention_type="original_full",
            use_bias=False,
            rescale_embeddings=True,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "big_bird-choices": (
        "big_bird",
        dict(attention_type="original_full", type_vocab_size=2),
        {**SPAN_AND_CHOICE, "heads": ("multiple-choice",)},
    ),
    # sep_token_id 5 in a vocabulary of 8: most rows hold one, so the question is masked
    "big_bird-answers": (
        "big_bird",
        dict(attention_type="original_full", type_vocab_size=2, vocab_size=8, sep_token_id=5),
        {**SPAN_AND_CHOICE, "heads": ("question-answering",)},
    ),
}
