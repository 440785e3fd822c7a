"""Jina Embeddings v3: XLM-RoBERTa with RoPE, a fused Wqkv and post-norm layers."""

CASES = {
    "jina_embeddings_v3": ("jina_embeddings_v3", dict(pad_token_id=1, num_labels=3)),
    "jina_embeddings_v3-types-untied-answers": (
        "jina_embeddings_v3",
        dict(
            pad_token_id=1,
            type_vocab_size=2,
            tie_word_embeddings=False,
            hidden_act="gelu_new",
            rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        ),
        {"heads": ("masked-lm", "question-answering"), "eps": ("default",)},
    ),
}
