"""CTRL: the tied head with its own bias, and an untied one; a distinct final-norm epsilon."""

CASES = {
    "ctrl": ("ctrl", dict(dff=128)),
    "ctrl-untied": ("ctrl", dict(dff=96, tie_word_embeddings=False, layer_norm_epsilon=1e-3)),
}
