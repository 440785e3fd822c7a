"""ModernBERT: RoPE per layer kind, sliding-window local layers, GLU MLP, head before every output."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    # three layers: global, local, local (window 2 both sides, narrower than the batch)
    "modernbert": (
        "modernbert",
        dict(num_hidden_layers=3, local_attention=4, global_rope_theta=1000.0),
    ),
    "modernbert-biased-untied-mean": (
        "modernbert",
        dict(
            norm_bias=True,
            attention_bias=True,
            mlp_bias=True,
            classifier_bias=True,
            tie_word_embeddings=False,
            classifier_pooling="mean",
            hidden_activation="gelu_new",
            classifier_activation="relu",
            local_attention=6,
            global_attn_every_n_layers=2,
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "modernbert-answers-choices": ("modernbert", dict(classifier_pooling="mean"), SPAN_AND_CHOICE),
}
