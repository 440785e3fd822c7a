"""LongCat-Flash: two doubled layers (four MLA caches) with DeepSeek's tiny MLA sizes;
6 routed + 2 zero (identity) experts, top-3, so tokens do land on zero experts and
the perturbed correction bias shifts the choice."""

from text_parity_cases.deepseek import MLA

LONGCAT = dict(
    {k: v for k, v in MLA.items()},
    num_layers=2,
    head_dim=MLA["qk_rope_head_dim"],
    n_routed_experts=6,
    zero_expert_num=2,
    moe_topk=3,
    expert_ffn_hidden_size=32,
    routed_scaling_factor=2.0,
)

CASES = {
    "longcat_flash": ("longcat_flash", LONGCAT),
    "longcat_flash-bias-tied": (
        "longcat_flash",
        dict(LONGCAT, attention_bias=True, tie_word_embeddings=True, zero_expert_num=3),
    ),
}
