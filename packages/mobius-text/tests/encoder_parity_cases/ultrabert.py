"""UltraBERT: EuroBERT's layers, sliding-window and global layers with their own RoPE bases."""

CASES = {
    # three layers: sliding, sliding, global; the window (2 both sides) narrower than the batch
    "ultrabert": (
        "ultrabert",
        dict(num_hidden_layers=3, sliding_window=2, prediction_head_size=24, num_labels=3),
    ),
    "ultrabert-gqa-biased-tied-mean-answers": (
        "ultrabert",
        dict(
            layer_types=["full_attention", "sliding_attention"],
            sliding_window=3,
            num_key_value_heads=2,
            attention_bias=True,
            mlp_bias=True,
            hidden_act="gelu",
            tie_word_embeddings=True,
            classifier_pooling="mean",
            prediction_head_size=24,
        ),
        {
            "heads": ("masked-lm", "sequence-classification", "question-answering"),
            "eps": ("default",),
        },
    ),
}
