"""GTE: post-norm layers with RoPE and a gated MLP, lm_head with its own decoder bias, pooler."""

CASES = {
    # one token type (no token_type_ids input), default theta 160000
    "gte": ("gte", dict()),
    # no token types at all, two types fed, untied decoder, relu gate, a small rope theta
    "gte-no-types-untied": (
        "gte",
        dict(
            type_vocab_size=0,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
            rope_parameters={"rope_type": "default", "rope_theta": 100.0},
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "gte-two-types": ("gte", dict(type_vocab_size=2), {"heads": ("none", "token-classification")}),
}
