"""BERT: token types, post-norm layers, tied masked-LM head, pooler for sequence classification."""

CASES = {
    "bert": ("bert", dict(type_vocab_size=2)),
    "bert-one-type-untied-relu": (
        "bert",
        dict(type_vocab_size=1, tie_word_embeddings=False, hidden_act="relu", num_labels=3),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
}
