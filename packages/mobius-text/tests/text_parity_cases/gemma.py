"""Gemma family: Gemma, Gemma 2, VaultGemma and Gemma 3 (text).

Cases make the distinctive parts bite: soft-capping values small enough that
tanh saturates, sliding windows shorter than the test sequence, layers of both
attention kinds, local and global rotary tables, tied and untied heads.
"""

CASES = {
    "gemma": ("gemma", dict(head_dim=16)),
    "gemma-untied-bias-head-dim": (
        "gemma",
        dict(head_dim=24, tie_word_embeddings=False, attention_bias=True),
    ),
    "gemma-mqa": ("gemma", dict(head_dim=16, num_key_value_heads=1, rms_norm_eps=1e-5)),
}

# Larger weights and a small query_pre_attn_scalar push attention scores and logits
# well past caps of 2-3, so tanh saturates; layer 0 slides (window 4), layer 1 is full.
SOFTCAPPED = dict(
    head_dim=16,
    sliding_window=4,
    initializer_range=0.2,
    query_pre_attn_scalar=8,
    attn_logit_softcapping=2.0,
    final_logit_softcapping=3.0,
)

CASES |= {
    "gemma2": ("gemma2", SOFTCAPPED),
    "gemma2-untied-bias-uncapped": (
        "gemma2",
        dict(
            head_dim=24,
            num_hidden_layers=3,
            sliding_window=4,
            tie_word_embeddings=False,
            attention_bias=True,
            attn_logit_softcapping=None,
            final_logit_softcapping=None,
        ),
    ),
}

CASES |= {
    "vaultgemma": ("vaultgemma", SOFTCAPPED),
    "vaultgemma-untied-uncapped": (
        "vaultgemma",
        dict(
            head_dim=16,
            sliding_window=4,
            tie_word_embeddings=False,
            layer_types=["full_attention", "sliding_attention"],
            attn_logit_softcapping=None,
            final_logit_softcapping=None,
        ),
    ),
}

# Local theta 10k on sliding layers, global theta 1M with linear scaling on full layers.
GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
}

CASES |= {
    "gemma3-text": (
        "gemma3_text",
        dict(
            head_dim=16,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters=GEMMA3_ROPE,
            query_pre_attn_scalar=16,
        ),
    ),
    # Three layers (sliding, full, sliding), untied, biased, and a final logit cap that bites.
    # transformers' Gemma 3 attention ignores attn_logit_softcapping: set here, it must change nothing.
    "gemma3-text-untied-capped": (
        "gemma3_text",
        dict(
            head_dim=24,
            num_hidden_layers=3,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            },
            tie_word_embeddings=False,
            attention_bias=True,
            initializer_range=0.2,
            query_pre_attn_scalar=4,
            attn_logit_softcapping=1.0,
            final_logit_softcapping=3.0,
        ),
    ),
}
