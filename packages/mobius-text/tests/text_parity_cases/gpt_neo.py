"""GPT-Neo: global and local layers, the local window (4) far shorter than the sequence."""

CASES = {
    "gpt_neo": (
        "gpt_neo",
        dict(attention_types=[[["global", "local"], 1]], window_size=4, intermediate_size=96),
    ),
    "gpt_neo-local-first-untied": (
        "gpt_neo",
        dict(
            attention_types=[[["local", "global"], 1]],
            window_size=3,
            intermediate_size=None,
            tie_word_embeddings=False,
        ),
    ),
}
