"""OpenAI GPT: post-norm blocks; its "gelu" is the tanh approximation; relu and untied head too."""

CASES = {
    "openai-gpt": ("openai-gpt", dict(n_embd=64, n_head=4, n_layer=2)),
    "openai-gpt-relu-untied": (
        "openai-gpt",
        dict(n_embd=64, n_head=4, n_layer=2, afn="relu", tie_word_embeddings=False),
    ),
}
