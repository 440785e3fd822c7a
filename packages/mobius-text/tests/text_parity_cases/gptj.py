"""GPT-J: partial and full interleaved rotary, untied (default) and tied biased heads."""

CASES = {
    "gptj-partial-rotary": ("gptj", dict(rotary_dim=8, n_inner=96)),
    "gptj-full-rotary-tied": ("gptj", dict(rotary_dim=16, tie_word_embeddings=True)),
}
