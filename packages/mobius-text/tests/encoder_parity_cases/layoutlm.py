"""LayoutLM: BERT plus the embeddings of each token's box (``bbox``, an input of its own)."""

from mobius.testing import random_boxes

BOXES = {"bbox": random_boxes(50)}  # within max_2d_position_embeddings

CASES = {
    "layoutlm": (
        "layoutlm",
        dict(type_vocab_size=2, max_2d_position_embeddings=50),
        {
            "heads": ("none", "masked-lm", "sequence-classification", "token-classification"),
            "extra_inputs": BOXES,
        },
    ),
    # The span head: transformers maps it for document QA only, so the class is named.
    "layoutlm-answers": (
        "layoutlm",
        dict(type_vocab_size=2, max_2d_position_embeddings=50),
        {
            "heads": ("question-answering",),
            "eps": ("default",),
            "model_class": "LayoutLMForQuestionAnswering",
            "extra_inputs": BOXES,
        },
    ),
}
