"""Nystromformer: exact or landmark attention, the depthwise conv on values, positions from 2."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    # num_landmarks == segment_means_seq_len (64): exact softmax plus the value conv, padded batch
    "nystromformer": ("nystromformer", dict(conv_kernel_size=5)),
    # landmark mode: 4 landmarks of 2 tokens over sequences of segment_means_seq_len (8).
    # transformers 5 fails on a padded batch here (its [b, 1, seq, seq] mask meets the
    # [b, heads, landmarks, seq] scores), so the batch is two full rows.
    "nystromformer-landmarks-untied": (
        "nystromformer",
        dict(
            segment_means_seq_len=8,
            num_landmarks=4,
            conv_kernel_size=3,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"lengths": (8, 8)},
    ),
    # the padded landmark batch transformers 5 does run: 4 landmarks from rows of 4 tokens,
    # the batch axis folded into the segments (-1), so the mask meets [b, heads, 4, 4] scores
    "nystromformer-landmarks-padded": (
        "nystromformer",
        dict(segment_means_seq_len=8, num_landmarks=4, conv_kernel_size=3),
        {"lengths": (4, 3), "heads": ("none", "masked-lm")},
    ),
    # the default 65-wide conv (wider than the batch), one token type, the sentence embedding
    "nystromformer-wide-conv": (
        "nystromformer",
        dict(type_vocab_size=1),
        {"heads": ("sequence-classification", "sentence-embedding")},
    ),
    "nystromformer-answers": (
        "nystromformer",
        dict(conv_kernel_size=5),
        SPAN_AND_CHOICE,
    ),
}
