"""RoCBert: BERT plus glyph-shape and pronunciation ids (inputs of its own), concatenated
and mapped (``concat_input``) or averaged with BERT's embeddings."""

from mobius.testing import random_ids

SIZES = dict(
    type_vocab_size=2,
    shape_vocab_size=23,
    shape_embed_dim=12,
    pronunciation_vocab_size=17,
    pronunciation_embed_dim=20,
)
IDS = {"input_shape_ids": random_ids(23), "input_pronunciation_ids": random_ids(17)}

CASES = {
    "roc_bert": (
        "roc_bert",
        SIZES,
        {
            "heads": ("none", "masked-lm", "sequence-classification", "token-classification"),
            "extra_inputs": IDS,
        },
    ),
    # Averaged (no concat_input; the shape vectors are hidden-wide) with only the shape ids;
    # the span and choice heads.
    "roc_bert-mean-shape-answers-choices": (
        "roc_bert",
        dict(SIZES, concat_input=False, enable_pronunciation=False, shape_embed_dim=32),
        {
            "heads": ("question-answering", "multiple-choice", "masked-lm"),
            "lengths": (7, 4, 6, 3),
            "eps": ("default",),
            "extra_inputs": {"input_shape_ids": random_ids(23)},
        },
    ),
}
