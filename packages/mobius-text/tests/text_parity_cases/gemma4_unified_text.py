"""Gemma 4 unified (text): Gemma 4's decoder without per-layer inputs, its config's
default ``use_bidirectional_attention="vision"`` (causal for text alone).

Four layers (sliding, full | sliding, full): k-equals-v full layers with their own
head_dim and kv heads, proportional RoPE, the last two layers sharing the K/V of
layers 0 and 1 with double-wide MLPs, a window of 4 shorter than the test sequence.
"""

from text_parity_cases.gemma4_text import ROPE

CASES = {
    "gemma4-unified-text": (
        "gemma4_unified_text",
        dict(
            head_dim=16,
            global_head_dim=32,
            num_global_key_value_heads=1,
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention"] * 2,
            sliding_window=4,
            rope_parameters=ROPE,
            num_kv_shared_layers=2,
            attention_k_eq_v=True,
            use_double_wide_mlp=True,
            initializer_range=0.2,
            final_logit_softcapping=3.0,
        ),
    ),
}
