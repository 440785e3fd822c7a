"""Aria's decoder: 4 experts, top-2 over the logits, two shared experts' width, a silu-gated
router whatever ``hidden_act`` (gelu here, the shared experts' own)."""

CASES = {
    "aria_text": (
        "aria_text",
        dict(moe_num_experts=4, moe_topk=2, moe_num_shared_experts=2, hidden_act="gelu"),
    ),
}
