"""SqueezeBERT: grouped 1x1 convolutions channels-first, block norms at eps 1e-12, BERT's heads."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    # a different group count for every projection (the output's 48 -> 32 in 8 groups)
    "squeezebert-groups": (
        "squeezebert",
        dict(
            embedding_size=32,
            intermediate_size=48,
            type_vocab_size=2,
            q_groups=4,
            k_groups=2,
            v_groups=1,
            post_attention_groups=2,
            intermediate_groups=4,
            output_groups=8,
        ),
    ),
    # layer_norm_eps reaches the embeddings' norm only; the blocks keep 1e-12
    "squeezebert-eps-untied-relu": (
        "squeezebert",
        dict(
            embedding_size=32,
            intermediate_size=48,
            type_vocab_size=1,
            layer_norm_eps=1e-3,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "squeezebert-answers-choices": (
        "squeezebert",
        dict(embedding_size=32, intermediate_size=48, type_vocab_size=2, q_groups=4),
        SPAN_AND_CHOICE,
    ),
}
