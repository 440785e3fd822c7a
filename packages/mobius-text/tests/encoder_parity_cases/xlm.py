"""XLM: parallel layer lists, token types through the word embeddings, sequence summaries."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "xlm": ("xlm", dict()),
    # sinusoidal-initialised positions (a checkpoint tensor all the same), ReLU, untied,
    # languages without language embeddings, a tanh summary of the mean state
    "xlm-relu-untied-mean-summary": (
        "xlm",
        dict(
            sinusoidal_embeddings=True,
            gelu_activation=False,
            tie_word_embeddings=False,
            n_langs=3,
            use_lang_emb=False,
            summary_type="mean",
            summary_activation="tanh",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "xlm-causal-last-summary": (
        "xlm",
        dict(causal=True, summary_type="last"),
        {"heads": ("none", "sequence-classification")},
    ),
    "xlm-answers-choices": ("xlm", dict(), SPAN_AND_CHOICE),
}
