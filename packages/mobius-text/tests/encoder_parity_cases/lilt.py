"""LiLT: RoBERTa's text stream and a layout stream over ``bbox``, one shared attention map."""

from mobius.testing import random_boxes

BOXES = {"bbox": random_boxes(50)}  # within max_2d_position_embeddings
# hidden divisible by 6 (the box parts) and the head size (12) by channel_shrink_ratio
LILT = dict(hidden_size=48, max_2d_position_embeddings=50)

CASES = {
    "lilt": (
        "lilt",
        dict(LILT, type_vocab_size=2),
        {
            "heads": ("none", "sequence-classification", "token-classification"),
            "extra_inputs": BOXES,
        },
    ),
    # Another shrink ratio, one token type (no token_type_ids input), the span head.
    "lilt-ratio2": (
        "lilt",
        dict(LILT, channel_shrink_ratio=2, type_vocab_size=1, hidden_act="gelu_new"),
        {"heads": ("question-answering",), "eps": ("default",), "extra_inputs": BOXES},
    ),
}
