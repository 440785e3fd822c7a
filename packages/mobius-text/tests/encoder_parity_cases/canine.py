"""CANINE: hashed code points, chunked local attention, molecules, conv up-projection."""

from encoder_parity_cases import SPAN_AND_CHOICE

# 4 hash shards of 8, chunks of 4 characters, molecules of 2 characters
CANINE = dict(
    num_hash_functions=4, num_hash_buckets=61, local_transformer_stride=4, type_vocab_size=3
)

CASES = {
    # rows of 11 and 6 characters: 5 molecules, the short row's pads fill whole chunks
    "canine": (
        "canine",
        dict(CANINE, downsampling_rate=2),
        {"heads": ("none", "sequence-classification"), "lengths": (11, 6)},
    ),
    # molecules of 3, an odd projection kernel, relu
    "canine-rate3-kernel3": (
        "canine",
        dict(
            CANINE, downsampling_rate=3, upsampling_kernel_size=3, hidden_act="relu", num_labels=3
        ),
        {"heads": ("token-classification",), "lengths": (14, 5)},
    ),
    "canine-answers-choices": (
        "canine",
        dict(CANINE, downsampling_rate=2),
        {**SPAN_AND_CHOICE, "lengths": (11, 6, 9, 8)},
    ),
}
