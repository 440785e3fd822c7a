"""I-BERT in float mode (quant_mode=False): RoBERTa under ibert, quantisation buffers unread."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "ibert": ("ibert", dict(type_vocab_size=1, pad_token_id=1)),
    "ibert-two-types-untied": (
        "ibert",
        dict(type_vocab_size=2, tie_word_embeddings=False, num_labels=3),
        {"heads": ("masked-lm", "sequence-classification")},
    ),
    "ibert-answers-choices": ("ibert", dict(type_vocab_size=1, pad_token_id=1), SPAN_AND_CHOICE),
}
