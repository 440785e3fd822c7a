"""RecurrentGemma: RG-LRU and local-attention layers; a window of 5 (< the 15-token test sequence),
an LRU wider than hidden, and a logit soft cap low enough to bite."""

GRIFFIN = dict(
    num_hidden_layers=4,
    block_types=["recurrent", "attention"],
    attention_window_size=5,
    lru_width=96,
    conv1d_width=4,
    logits_soft_cap=2.0,
)

CASES = {
    "recurrent_gemma": ("recurrent_gemma", GRIFFIN),
    "recurrent_gemma-untied-bias-mha": (
        "recurrent_gemma",
        dict(
            GRIFFIN,
            block_types=["recurrent", "recurrent", "attention"],
            tie_word_embeddings=False,
            attention_bias=True,
            num_key_value_heads=4,
            hidden_size=48,  # sqrt(48) rounds in bfloat16 (transformers' normaliser buffer)
            lru_width=48,
            conv1d_width=3,
        ),
    ),
}
