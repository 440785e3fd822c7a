"""NomicBERT: GTE's rotary post-norm layers without biases, emb_ln, BERT's heads."""

CASES = {
    "nomic_bert": ("nomic_bert", dict()),
    # heads wider than hidden / heads (16 against 8), untied decoder, gelu gate, small theta
    "nomic_bert-wide-heads": (
        "nomic_bert",
        dict(
            head_dim=16,
            tie_word_embeddings=False,
            hidden_act="gelu",
            num_labels=3,
            rope_parameters={"rope_type": "default", "rope_theta": 100.0},
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
}
