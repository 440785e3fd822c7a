"""BERT: token types, post-norm layers, tied masked-LM head, pooler for sequence classification."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "bert": ("bert", dict(type_vocab_size=2)),
    "bert-one-type-untied-relu": (
        "bert",
        dict(type_vocab_size=1, tie_word_embeddings=False, hidden_act="relu", num_labels=3),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "bert-answers-choices": ("bert", dict(type_vocab_size=2), SPAN_AND_CHOICE),
}
