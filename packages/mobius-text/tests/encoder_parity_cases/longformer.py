"""Longformer: windows narrower than the batch's rows, per layer; RoBERTa's positions and heads."""

CASES = {
    # one-sided windows of 2 and 3 tokens over rows of 7 and 4: the band is what is checked
    "longformer": (
        "longformer",
        dict(attention_window=[4, 6], pad_token_id=1),
        {"heads": ("none", "masked-lm", "token-classification")},
    ),
}
