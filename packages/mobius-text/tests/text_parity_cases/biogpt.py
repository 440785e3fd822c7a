"""BioGPT: scaled embeddings with a tied head; unscaled embeddings with an untied one."""

CASES = {
    "biogpt": ("biogpt", {}),
    "biogpt-unscaled-untied": (
        "biogpt",
        dict(scale_embedding=False, tie_word_embeddings=False, hidden_act="gelu_new"),
    ),
}
