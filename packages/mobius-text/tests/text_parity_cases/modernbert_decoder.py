"""ModernBERT decoder: embedding LayerNorm, no attention norm on layer 0, local/global
layers with their own RoPE bases, GLU MLP, prediction head and biased (tied) decoder.

``local_attention`` 8 gives a sliding window of 4, shorter than the 15-token test sequence.
"""

MODERNBERT = dict(
    num_hidden_layers=3,
    local_attention=8,
    layer_types=["full_attention", "sliding_attention", "full_attention"],
)

CASES = {
    "modernbert-decoder": ("modernbert-decoder", MODERNBERT),
    "modernbert-decoder-biases-untied": (
        "modernbert-decoder",
        dict(
            MODERNBERT,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            norm_bias=True,
            attention_bias=True,
            mlp_bias=True,
            classifier_bias=True,
            classifier_activation="silu",
            hidden_activation="gelu_pytorch_tanh",
            tie_word_embeddings=False,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 40000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
            },
        ),
    ),
    "modernbert-decoder-nobias-head": ("modernbert-decoder", dict(MODERNBERT, decoder_bias=False)),
}
