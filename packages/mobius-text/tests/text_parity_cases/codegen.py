"""CodeGen: the 4-shard q|v|k layout with 2 heads per shard, partial rotary; a tied head."""

CASES = {
    "codegen": ("codegen", dict(num_attention_heads=8, rotary_dim=4, n_inner=96)),
    "codegen-tied": ("codegen", dict(rotary_dim=16, tie_word_embeddings=True)),
}
