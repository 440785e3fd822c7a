"""RoBERTa, XLM-RoBERTa, CamemBERT: padding-aware positions, lm_head and classification head."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "roberta": ("roberta", dict(type_vocab_size=2)),
    "roberta-one-type-untied-relu": (
        "roberta",
        dict(
            type_vocab_size=1,
            pad_token_id=1,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "xlm-roberta": ("xlm-roberta", dict(type_vocab_size=1, pad_token_id=1)),
    "camembert": (
        "camembert",
        dict(type_vocab_size=1, pad_token_id=1),
        {"heads": ("none", "masked-lm", "sequence-classification", "token-classification")},
    ),
    "roberta-answers-choices": ("roberta", dict(type_vocab_size=2), SPAN_AND_CHOICE),
    "xlm-roberta-answers-choices": (
        "xlm-roberta",
        dict(type_vocab_size=1, pad_token_id=1),
        SPAN_AND_CHOICE,
    ),
    "camembert-answers-choices": (
        "camembert",
        dict(type_vocab_size=1, pad_token_id=1),
        SPAN_AND_CHOICE,
    ),
}
