"""MiniMax-M2: 8 sigmoid-routed experts (top-2), full-width q/k norms, partial RoPE.

The harness perturbs parameters only, so the ``e_score_correction_bias`` buffer stays
zero here: the biased-choice path is built but its bias is not exercised.
"""

BASE = dict(num_local_experts=8, num_experts_per_tok=2, head_dim=16, bos_token_id=1, eos_token_id=2)

CASES = {
    "minimax_m2": ("minimax_m2", dict(**BASE)),
    "minimax_m2-partial-rotary": ("minimax_m2", dict(**BASE, rotary_dim=8)),
}
