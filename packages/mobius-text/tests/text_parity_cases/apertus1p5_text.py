"""Apertus 1.5 text: Apertus with the LM head pruned to the first 100 of 128 tokens."""

CASES = {
    "apertus1p5_text-pruned-head": ("apertus1p5_text", dict(output_vocab_size=100)),
    "apertus1p5_text-tied": ("apertus1p5_text", dict(tie_word_embeddings=True)),
}
