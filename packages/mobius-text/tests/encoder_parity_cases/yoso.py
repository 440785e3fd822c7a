"""YOSO (expectation mode): acos-power attention on normalised q/k, positions from 2, value conv."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "yoso": ("yoso", dict(type_vocab_size=2)),
    # the value conv over masked values, another hash length, untied decoder, relu
    "yoso-conv-untied": (
        "yoso",
        dict(
            conv_window=3,
            hash_code_len=4,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "yoso-answers-choices": ("yoso", dict(type_vocab_size=2), SPAN_AND_CHOICE),
}
