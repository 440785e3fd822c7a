"""GPT-BigCode: multi-query (one shared key/value head) and multi-head fused layouts."""

CASES = {
    "gpt_bigcode-mqa": ("gpt_bigcode", dict(n_inner=96)),
    "gpt_bigcode-mha-untied": ("gpt_bigcode", dict(multi_query=False, tie_word_embeddings=False)),
}
