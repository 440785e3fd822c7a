"""Dory: five layers (1 input, 2 recurrent run twice, 2 output), so the per-loop
caches (7 in all) and the loop re-injection are exercised; sliding layers with a
window of 4 under the 15-token test sequence, full every fourth layer."""

DORY = dict(
    head_dim=16,
    num_hidden_layers=5,
    n_input_layers=1,
    n_output_layers=2,
    n_recurrent_loops=2,
    sliding_window=4,
)

CASES = {
    "dory": ("dory", DORY),
    "dory-three-loops-bias": (
        "dory",
        dict(DORY, n_recurrent_loops=3, attention_bias=True, mlp_bias=True, n_output_layers=1),
    ),
}
