"""Gemma 3n (text): AltUp, LAuReL, per-layer input embeddings, activation sparsity
and KV sharing.

Five layers (sliding, full, sliding | sliding, full): the last two share the K/V of
layers 2 and 1, a window of 4 is shorter than the test sequence, the per-layer table
is smaller than the vocabulary (ids past it read row 0), Gaussian top-k sparsity is on
in some layers, and large weights make the final logit cap bite.
"""

ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10_000.0},
}
GEMMA3N = dict(
    head_dim=16,
    num_hidden_layers=5,
    layer_types=[
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ],
    sliding_window=4,
    rope_parameters=ROPE,
    num_kv_shared_layers=2,
    hidden_size_per_layer_input=16,
    vocab_size_per_layer_input=96,
    laurel_rank=8,
    activation_sparsity_pattern=[0.95, 0.0, 0.5, 0.0, 0.95],
)

CASES = {
    "gemma3n-text": (
        "gemma3n_text",
        dict(GEMMA3N, initializer_range=0.2, final_logit_softcapping=3.0),
    ),
    # No sharing, three AltUp streams with stream 1 active, no output scaling, untied and
    # biased, per-layer intermediate sizes, the default logit cap.
    "gemma3n-text-untied-altup3": (
        "gemma3n_text",
        dict(
            GEMMA3N,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            activation_sparsity_pattern=[0.0, 0.9, 0.0],
            intermediate_size=[128, 96, 64],
            num_kv_shared_layers=0,
            altup_num_inputs=3,
            altup_active_idx=1,
            altup_correct_scale=False,
            tie_word_embeddings=False,
            attention_bias=True,
            final_logit_softcapping=30.0,
        ),
    ),
}
