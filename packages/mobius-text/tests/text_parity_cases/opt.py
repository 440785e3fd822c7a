"""OPT: pre-norm (opt-125m...), post-norm with project_in/out (opt-350m), no biases and no
affine norms, untied heads."""

CASES = {
    "opt": ("opt", dict(ffn_dim=128)),
    "opt-350m-style": (
        "opt",
        dict(ffn_dim=128, do_layer_norm_before=False, word_embed_proj_dim=32),
    ),
    "opt-nobias-plain-norm-untied": (
        "opt",
        dict(
            ffn_dim=96,
            enable_bias=False,
            layer_norm_elementwise_affine=False,
            tie_word_embeddings=False,
            activation_function="gelu",
        ),
    ),
    "opt-project-pre-norm": ("opt", dict(ffn_dim=128, word_embed_proj_dim=48)),
}
