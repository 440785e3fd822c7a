"""LFM3: conv, sliding (window under the prompt) and full ("proportional" partial RoPE) layers,
gated heads and sandwich norms; then both switched off."""

HYBRID = dict(
    num_hidden_layers=4,
    head_dim=16,
    layer_types=["conv", "sliding_attention", "full_attention", "conv"],
    sliding_window=4,
    conv_L_cache=3,
    norm_eps=1e-5,
    bos_token_id=1,  # the config's defaults are the hub vocabulary's
    eos_token_id=2,
)

CASES = {
    "lfm3": ("lfm3", HYBRID),
    "lfm3-ungated-no-sandwich-conv-bias": (
        "lfm3",
        dict(HYBRID, use_attention_gate=False, use_sandwich_norm=False, conv_bias=True),
    ),
}
