"""RoFormer: interleaved rotary from the checkpoint's sinusoidal table, BERT-like post-norm layers."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "roformer": ("roformer", dict(type_vocab_size=2)),
    # embeddings narrower than the layers (embeddings_project), values rotated, untied decoder
    "roformer-narrow-rotary-value-untied": (
        "roformer",
        dict(
            embedding_size=24,
            rotary_value=True,
            tie_word_embeddings=False,
            hidden_act="gelu_new",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "roformer-answers-choices": ("roformer", dict(type_vocab_size=2), SPAN_AND_CHOICE),
}
