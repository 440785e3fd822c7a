"""T5Gemma 2 (text to text): Gemma 3 stacks, merged self/cross attention, the end-of-image embedding.

A tiny SigLIP tower stands in for the vision encoder the text path never runs.
"""

STACK = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    query_pre_attn_scalar=6,  # not head_dim: the scale must come from it
    sliding_window=4,  # shorter than the sources and than the 10 decoder tokens
    layer_types=["sliding_attention", "full_attention"],
    max_position_embeddings=64,
    final_logit_softcapping=3.0,
)
VISION = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
)


def t5gemma2(encoder=None, decoder=None, **top):
    return dict(
        encoder=dict(
            text_config=dict(STACK, **(encoder or {})),
            vision_config=VISION,
            mm_tokens_per_image=4,
            eoi_token_index=6,  # the decoder's second prefill token in row 1
        ),
        decoder=dict(STACK, **(decoder or {})),
        decoder_start_token_id=2,
        **top,
    )


CASES = {
    "t5gemma2": ("t5gemma2", t5gemma2()),
    # odd window, three layers, other rotary bases, an untied head, no logit cap
    "t5gemma2-untied-window": (
        "t5gemma2",
        t5gemma2(
            encoder=dict(
                num_hidden_layers=3,
                sliding_window=3,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                rope_parameters={
                    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                    "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 4.0},
                },
            ),
            decoder=dict(
                sliding_window=3,
                final_logit_softcapping=None,
                layer_types=["full_attention", "sliding_attention"],
            ),
            tie_word_embeddings=False,
        ),
        {"lengths": (9, 5)},
    ),
}
