"""FlauBERT: XLM's post-norm layers under another model_type (pre_norm: see the model file)."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "flaubert": ("flaubert", dict()),
    "flaubert-relu-untied-first-summary": (
        "flaubert",
        dict(
            gelu_activation=False,
            tie_word_embeddings=False,
            summary_activation="tanh",
            layerdrop=0.2,
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "flaubert-answers-choices": ("flaubert", dict(), SPAN_AND_CHOICE),
}
