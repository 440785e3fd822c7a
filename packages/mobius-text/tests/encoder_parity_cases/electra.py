"""ELECTRA: embeddings_project from embedding_size, generator masked-LM head, dense/out_proj classifier."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "electra": ("electra", dict(embedding_size=16, type_vocab_size=2)),
    # embeddings as wide as the encoder: no embeddings_project
    "electra-same-width-untied-relu": (
        "electra",
        dict(embedding_size=32, tie_word_embeddings=False, hidden_act="relu", num_labels=3),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "electra-answers-choices": (
        "electra",
        dict(embedding_size=16, type_vocab_size=2),
        SPAN_AND_CHOICE,
    ),
}
