"""Doge: dynamic mask attention, residual scales, CDMoE.

``keep_window_size`` is shorter than the 15-token test sequence, so the top-k
selection of keys bites. The MoE cases keep 12 keys rather than 5: layer 0's key
scores depend only on the token, so a token that repeats makes an exact tie, and
PyTorch's ``topk(sorted=False)`` breaks ties in an implementation-defined order
(ONNX ``TopK`` keeps the lower index). With seed 0 the MoE models' greedy streams
repeat a token right at the selection boundary for windows 5-10; 12 has no tie there.
"""

DOGE = dict(keep_window_size=5)
MOE = dict(keep_window_size=12, is_moe=True, num_experts=16, num_experts_per_tok=3)

CASES = {
    "doge": ("doge", DOGE),
    "doge-bias-sliding-tied": (
        "doge",
        dict(DOGE, attention_bias=True, mlp_bias=True, sliding_window=4, tie_word_embeddings=True),
    ),
    "doge-moe": ("doge", MOE),
    "doge-moe-norm-mqa": ("doge", dict(MOE, norm_topk_prob=True, num_key_value_heads=1)),
}
