"""RoBERTa-PreLayerNorm: pre-norm layers and a final LayerNorm under roberta_prelayernorm."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "roberta-prelayernorm": ("roberta-prelayernorm", dict(type_vocab_size=1, pad_token_id=1)),
    "roberta-prelayernorm-two-types-untied-gelu-new": (
        "roberta-prelayernorm",
        dict(type_vocab_size=2, tie_word_embeddings=False, hidden_act="gelu_new", num_labels=3),
        {"heads": ("masked-lm", "sequence-classification")},
    ),
    "roberta-prelayernorm-answers-choices": (
        "roberta-prelayernorm",
        dict(type_vocab_size=1, pad_token_id=1),
        SPAN_AND_CHOICE,
    ),
}
