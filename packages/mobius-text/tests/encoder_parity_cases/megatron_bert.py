"""Megatron-BERT: pre-norm layers, no embedding LayerNorm, encoder.ln; BERT's heads."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "megatron-bert": ("megatron-bert", dict(type_vocab_size=2)),
    "megatron-bert-one-type-untied-relu": (
        "megatron-bert",
        dict(type_vocab_size=1, tie_word_embeddings=False, hidden_act="relu", num_labels=3),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "megatron-bert-answers-choices": ("megatron-bert", dict(type_vocab_size=2), SPAN_AND_CHOICE),
}
