"""Mixtral: 8 experts, top-2, so a wrong route changes the logits; sliding window below the prompt."""

CASES = {
    "mixtral": ("mixtral", dict(num_local_experts=8, num_experts_per_tok=2)),
    "mixtral-sliding": (
        "mixtral",
        dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=4),
    ),
}
