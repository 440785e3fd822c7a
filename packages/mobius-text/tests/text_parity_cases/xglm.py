"""XGLM: sinusoidal positions; pad_token_id 4 zeroes table row 4, i.e. position 2, which the
prompt uses; unscaled embeddings with an untied head."""

CASES = {
    "xglm": ("xglm", dict(ffn_dim=128, pad_token_id=4)),
    "xglm-unscaled-untied": (
        "xglm",
        dict(
            ffn_dim=96, scale_embedding=False, tie_word_embeddings=False, activation_function="relu"
        ),
    ),
}
