"""MPNet: T5-style relative position buckets (always 32 of them), padding-aware positions."""

from encoder_parity_cases import SPAN_AND_CHOICE

# 20 tokens: distances 8..19 fall into the log buckets (16 sits on a bucket boundary).
CASES = {
    "mpnet-log-buckets": ("mpnet", dict(pad_token_id=1), {"lengths": (20, 9)}),
    # a table of 40 rows: transformers still buckets into 32 (compute_position_bias' default)
    "mpnet-wide-table-untied-relu": (
        "mpnet",
        dict(
            pad_token_id=1,
            relative_attention_num_buckets=40,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {
            "heads": ("masked-lm", "sequence-classification", "sentence-embedding"),
            "lengths": (18, 11),
        },
    ),
    "mpnet-answers-choices": ("mpnet", dict(pad_token_id=1), SPAN_AND_CHOICE),
}
