"""MVP: BART's layout; ``use_prompt`` prepends per-layer prompt keys/values (an embedding through
an MLP) to the decoder's self- and cross-attention (transformers' encoder has none)."""

from seq2seq_parity_cases.bart import BART

CASES = {
    "mvp": ("mvp", BART),
    "mvp-prompt": (
        "mvp",
        dict(BART, use_prompt=True, prompt_length=3, prompt_mid_dim=24, scale_embedding=True),
    ),
}
