"""LED: BART with a sliding-window encoder; sources longer than the windows, per-layer windows."""

from seq2seq_parity_cases.bart import BART

LED = dict(
    {k: v for k, v in BART.items() if k != "max_position_embeddings"},
    max_encoder_position_embeddings=64,
    max_decoder_position_embeddings=48,
    attention_window=4,  # one-sided 2: the 7-token source is longer than a window
)

CASES = {
    "led": ("led", LED),
    # Windows of 4 and 8 tokens (one-sided 2 and 4; transformers fails on a window of 2);
    # sources of 13 and 5, neither a multiple of either.
    "led-windows": ("led", dict(LED, attention_window=[4, 8]), {"lengths": (13, 5)}),
}
