"""ERNIE: BERT under the ernie prefix, with and without task-type embeddings."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "ernie": ("ernie", dict(type_vocab_size=2)),
    "ernie-task-ids-untied": (
        "ernie",
        dict(
            type_vocab_size=4, use_task_id=True, task_type_vocab_size=3, tie_word_embeddings=False
        ),
        {"heads": ("none", "masked-lm", "sequence-classification")},
    ),
    "ernie-answers-choices": ("ernie", dict(type_vocab_size=2), SPAN_AND_CHOICE),
}
