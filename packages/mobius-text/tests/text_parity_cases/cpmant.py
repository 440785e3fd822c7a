"""CPM-Ant: a 4-token learned prompt, segment embeddings, bidirectional bucketed position bias.

transformers' forward re-reads the whole sequence with its cache (``torch_full_ids``).
16 buckets (exact below 4) and max distance 12 put the pairs of a case in exact and
log-spaced buckets of both signs, up to the last bucket (the clamp). ``init_std=0.02``:
the default 1.0 makes every weight std 1 and attention logits of hundreds, where
transformers' own fp32 run differs from its fp64 run by 4e-4 (logits ~28, measured);
the graph then differs by 2.5e-4, the same rounding, with identical tokens.
"""

CPMANT = dict(
    dim_head=16,
    dim_ff=96,
    position_bias_num_buckets=16,
    position_bias_max_distance=12,
    prompt_types=3,
    prompt_length=4,
    segment_types=3,
    init_std=0.02,
)

CASES = {"cpmant": ("cpmant", CPMANT, {"torch_full_ids": True})}
