"""XLM-RoBERTa-XL: no embedding LayerNorm, pre-norm layers, the encoder's final LayerNorm."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "xlm-roberta-xl": ("xlm-roberta-xl", dict(pad_token_id=1)),  # one token type: no input
    "xlm-roberta-xl-two-types-untied": (
        "xlm-roberta-xl",
        dict(type_vocab_size=2, tie_word_embeddings=False, num_labels=3),
        {"heads": ("masked-lm", "token-classification", "sentence-embedding")},
    ),
    "xlm-roberta-xl-answers-choices": ("xlm-roberta-xl", dict(pad_token_id=1), SPAN_AND_CHOICE),
}
