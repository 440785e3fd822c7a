"""ESM: pre-norm layers, rotary (ESM-2) or fairseq absolute positions (ESM-1b), token dropout."""

# The parity batch's first row holds id 52 among its real tokens; the second row's
# padding holds id 61 (HF counts masks on pads in the ratio too).
CASES = {
    "esm-rotary-token-dropout": (
        "esm",
        dict(position_embedding_type="rotary", token_dropout=True, mask_token_id=52),
    ),
    "esm-absolute-norm-before-untied": (
        "esm",
        dict(
            position_embedding_type="absolute",
            emb_layer_norm_before=True,
            token_dropout=True,
            mask_token_id=61,
            tie_word_embeddings=False,
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
}
