"""Ministral 3: YaRN plus Llama 4 query scaling that changes every 4 positions here."""


def rope(original: int, beta: float = 0.5, **extra) -> dict:
    return {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": original,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": beta,
        **extra,
    }


CASES = {
    # floor(position / 4) runs 0..3 over the 15 positions: the query scale bites.
    "ministral3": ("ministral3", dict(head_dim=16, rope_parameters=rope(4))),
    "ministral3-sliding-tied": (
        "ministral3",
        dict(
            head_dim=24,
            sliding_window=4,
            tie_word_embeddings=True,
            rope_parameters=rope(4, mscale=2.0, mscale_all_dim=0.5),
        ),
    ),
}
