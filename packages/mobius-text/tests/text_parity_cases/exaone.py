"""EXAONE 3.0: Llama under GPT-2-style checkpoint names (``save_pretrained`` writes them)."""

CASES = {
    "exaone": ("exaone", {}),
    # num_layers and layer_norm_epsilon are EXAONE's aliases of the Llama fields.
    "exaone-tied": ("exaone", dict(tie_word_embeddings=True, layer_norm_epsilon=1e-3)),
}
