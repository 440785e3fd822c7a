"""T5Gemma's encoder alone (``T5GemmaEncoderModel``): PRX's text encoder.

The stacks of the T5Gemma seq2seq cases: a window of 3 tokens on every other layer
(bidirectional: ``|i - j| <= 3``), shorter than the batch's rows, and soft-capped scores.
"""

from seq2seq_parity_cases.t5gemma import STACK

T5GEMMA_ENCODER = dict(encoder=STACK, decoder=STACK, is_encoder_decoder=False)

CASES = {
    "t5gemma-encoder": (
        "t5gemma",
        T5GEMMA_ENCODER,
        dict(heads=("none", "sentence-embedding"), model_class="T5GemmaEncoderModel"),
    ),
}
