"""EuroBERT: bidirectional Llama layers (RMSNorm, grouped KV heads, RoPE, SwiGLU), pooled classifiers."""

CASES = {
    # two KV heads for four query heads, untied lm_head, "late" pooling (mean of the logits)
    "eurobert": ("eurobert", dict(num_key_value_heads=2)),
    # biased projections and lm_head tied to the embeddings (its own bias), "mean" pooling
    "eurobert-tied-biased-mean": (
        "eurobert",
        dict(
            tie_word_embeddings=True,
            attention_bias=True,
            mlp_bias=True,
            classifier_pooling="mean",
            hidden_act="gelu",
            num_labels=3,
            rope_parameters={"rope_type": "default", "rope_theta": 250000.0},
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    # the first token pooled, heads wider than hidden / heads, one KV head
    "eurobert-bos-wide-heads": (
        "eurobert",
        dict(classifier_pooling="bos", head_dim=16, num_key_value_heads=1),
        {"heads": ("none", "sequence-classification")},
    ),
}
