"""ERNIE 4.5 MoE: 8 experts top-2 with a perturbed choice bias, shared experts, dense layers.

Three layers with ``moe_layer_start_index=1`` keep layer 0 dense; the second case puts
MoE on every second layer and turns ``use_bias`` on (untied head, as biases require).
"""

MOE = dict(moe_num_experts=8, moe_k=2, moe_intermediate_size=48)

CASES = {
    "ernie4_5_moe": (
        "ernie4_5_moe",
        dict(**MOE, num_hidden_layers=3, moe_num_shared_experts=2, moe_layer_start_index=1),
    ),
    "ernie4_5_moe-bias-interval": (
        "ernie4_5_moe",
        dict(
            **MOE,
            moe_num_shared_experts=1,
            moe_layer_start_index=0,
            moe_layer_interval=2,
            num_hidden_layers=3,
            use_bias=True,
            tie_word_embeddings=False,
        ),
    ),
    "ernie4_5_moe-no-shared": (
        "ernie4_5_moe",
        dict(**MOE, moe_num_shared_experts=0, moe_layer_start_index=0),
    ),
}
