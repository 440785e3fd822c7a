"""ALBERT: factorised embeddings, layer groups shared across layers, predictions.* masked-LM head."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "albert": ("albert", dict(embedding_size=16, type_vocab_size=2)),
    # three layers over two groups of two layers each: layers 0 and 1 share group 0
    "albert-groups-untied-gelu": (
        "albert",
        dict(
            embedding_size=24,
            num_hidden_layers=3,
            num_hidden_groups=2,
            inner_group_num=2,
            hidden_act="gelu",
            tie_word_embeddings=False,
            num_labels=3,
        ),
        {"heads": ("none", "masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "albert-answers-choices": (
        "albert",
        dict(embedding_size=16, type_vocab_size=2),
        SPAN_AND_CHOICE,
    ),
}
