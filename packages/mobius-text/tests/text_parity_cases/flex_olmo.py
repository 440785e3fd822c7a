"""FlexOlmo: post-norm layers around 7 routed experts (top-2), plain and renormalised."""

MOE = dict(num_experts=7, num_experts_per_tok=2, eos_token_id=2)

CASES = {
    "flex_olmo": ("flex_olmo", dict(**MOE)),
    "flex_olmo-norm-bias-tied": (
        "flex_olmo",
        dict(**MOE, norm_topk_prob=True, attention_bias=True, tie_word_embeddings=True),
    ),
}
