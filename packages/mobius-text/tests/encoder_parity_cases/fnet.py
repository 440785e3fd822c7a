"""FNet: Fourier mixing over the padded sequence (no mask), projected embeddings, BERT's heads.

The TPU variant's checkpoints carry complex64 DFT matrices the graph does not read.
"""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "fnet": ("fnet", dict(type_vocab_size=4)),
    # transformers then takes exactly tpu_short_seq_length tokens: both rows padded to 7.
    "fnet-tpu-dft-matrices": (
        "fnet",
        dict(type_vocab_size=2, use_tpu_fourier_optimizations=True, tpu_short_seq_length=7),
        {"heads": ("none", "masked-lm")},
    ),
    "fnet-untied-relu": (
        "fnet",
        dict(
            hidden_size=24,  # not a power of two: the DFT has no radix-2 shortcut
            type_vocab_size=2,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "fnet-answers-choices": ("fnet", dict(type_vocab_size=2), SPAN_AND_CHOICE),
}
