"""HRM-Text: 2 layers per stack, 2 H-cycles of 2 L-cycles (12 cache entries), gated MHA."""

HRM = dict(num_hidden_layers=2, num_attention_heads=4, head_dim=16, H_cycles=2, L_cycles=2)

CASES = {
    "hrm_text": ("hrm_text", HRM),
    # embedding_scale away from its 1/initializer_range default; tied head; other cycle counts.
    "hrm_text-tied-3x1": (
        "hrm_text",
        dict(HRM, H_cycles=3, L_cycles=1, embedding_scale=4.0, tie_word_embeddings=True),
    ),
}
