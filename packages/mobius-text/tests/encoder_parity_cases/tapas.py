"""TAPAS: BERT whose token types are seven columns (an input of its own shape), positions
counted per table cell or absolute."""

from mobius.testing import random_ids

TYPES = (3, 4, 5, 2, 6, 6, 10)  # segment, column, row, prev label, ranks, numeric relation
SMALL = dict(type_vocab_sizes=list(TYPES), max_position_embeddings=64)
HEADS = ("none", "masked-lm", "sequence-classification")

CASES = {
    # two columns and two rows: each cell spans several tokens, not side by side
    "tapas": (
        "tapas",
        SMALL,
        {"heads": HEADS, "extra_inputs": {"token_type_ids": random_ids(3, 2, 2, 2, 6, 6, 10)}},
    ),
    # absolute positions, an untied masked-LM head
    "tapas-absolute-untied": (
        "tapas",
        dict(SMALL, reset_position_index_per_cell=False, tie_word_embeddings=False),
        {
            "heads": ("masked-lm",),
            "eps": ("default",),
            "extra_inputs": {"token_type_ids": random_ids(*TYPES)},
        },
    ),
}
