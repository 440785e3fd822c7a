"""DistilBERT: no token types, q_lin/k_lin/v_lin/out_lin, vocab_* masked-LM head, pre_classifier."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "distilbert": ("distilbert", dict(hidden_dim=37)),
    "distilbert-untied-relu-sinusoidal": (
        "distilbert",
        dict(
            hidden_dim=37,
            activation="relu",
            tie_word_embeddings=False,
            sinusoidal_pos_embds=True,
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "distilbert-answers-choices": ("distilbert", dict(hidden_dim=37), SPAN_AND_CHOICE),
}
