"""GPT-NeoX-Japanese: the last layer's dense_bias, partial rotary, tied and untied heads."""

CASES = {
    "gpt_neox_japanese": ("gpt_neox_japanese", dict(rotary_pct=0.5, intermediate_multiple_size=3)),
    "gpt_neox_japanese-untied": ("gpt_neox_japanese", dict(tie_word_embeddings=False)),
}
