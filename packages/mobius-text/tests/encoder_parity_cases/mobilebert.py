"""MobileBERT: 3-gram embeddings, bottlenecks, stacked feed-forwards, NoNorm, its masked-LM decoder."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    # the released layout: NoNorm, 3-grams, a shared query/key bottleneck, 3 feed-forwards
    "mobilebert": (
        "mobilebert",
        dict(
            embedding_size=16,
            intra_bottleneck_size=24,
            num_feedforward_networks=3,
            type_vocab_size=2,
        ),
    ),
    # LayerNorm (where transformers drops the eps: 1e-5 against the config's 1e-3), the
    # narrowed input feeding queries, keys and values, no 3-grams, a plain first-token pooler
    "mobilebert-layer-norm-bottleneck-attention-untied": (
        "mobilebert",
        dict(
            embedding_size=16,
            intra_bottleneck_size=24,
            num_feedforward_networks=1,
            normalization_type="layer_norm",
            layer_norm_eps=1e-3,
            use_bottleneck_attention=True,
            trigram_input=False,
            classifier_activation=False,
            tie_word_embeddings=False,
            hidden_act="gelu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    # no bottleneck, no query/key sharing: the layers run at hidden_size; embeddings as
    # wide as hidden_size are not projected, and the decoder has no rows of its own
    "mobilebert-no-bottleneck": (
        "mobilebert",
        dict(
            embedding_size=32,
            use_bottleneck=False,
            key_query_shared_bottleneck=False,
            trigram_input=False,
            num_feedforward_networks=2,
            type_vocab_size=2,
        ),
        {"heads": ("none", "masked-lm", "token-classification")},
    ),
    "mobilebert-answers-choices": (
        "mobilebert",
        dict(
            embedding_size=16,
            intra_bottleneck_size=24,
            num_feedforward_networks=2,
            type_vocab_size=2,
        ),
        SPAN_AND_CHOICE,
    ),
}
