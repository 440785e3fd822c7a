"""BROS: BERT whose attention adds scores from the tokens' relative box positions."""

import numpy as np


def float_boxes(batch: int, seq: int, rng) -> np.ndarray:
    """Boxes ``[batch, seq, 4]`` normalised to 0..1 (x0 <= x1, y0 <= y1), as BROS reads them."""
    corners = rng.random((batch, seq, 2, 2))  # two (x, y) points
    low, high = corners.min(axis=2), corners.max(axis=2)
    return np.concatenate([low, high], axis=-1).astype(np.float32)


# hidden // 4 // 8 = 2 sinusoid channels per box value
BROS = dict(hidden_size=64, type_vocab_size=2)

CASES = {
    # transformers has a token classifier only (the SPADE heads are outside the contract)
    "bros": (
        "bros",
        BROS,
        {"heads": ("none", "token-classification"), "extra_inputs": {"bbox": float_boxes}},
    ),
}
