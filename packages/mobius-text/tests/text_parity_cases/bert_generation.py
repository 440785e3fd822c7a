"""BertGeneration's decoder: BERT without token types, causal, a bare vocabulary projection."""

DECODER = dict(is_decoder=True, bos_token_id=1, eos_token_id=2)

CASES = {
    "bert-generation": ("bert-generation", DECODER),
    "bert-generation-untied": ("bert-generation", dict(DECODER, tie_word_embeddings=False)),
}
