"""T5Gemma: two Gemma 2 stacks (soft-capping, sliding windows, sandwich norms) with cross-attention."""

STACK = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    query_pre_attn_scalar=6,  # not head_dim: the scale must come from it
    sliding_window=3,  # shorter than the source and than the 10 decoder tokens
    attn_logit_softcapping=2.0,  # low enough that the caps bend the scores
    final_logit_softcapping=3.0,
    max_position_embeddings=64,
)


def t5gemma(encoder=None, decoder=None, **top):
    return dict(
        encoder=dict(STACK, **(encoder or {})),
        decoder=dict(STACK, **(decoder or {})),
        vocab_size=99,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        decoder_start_token_id=2,
        **top,
    )


CASES = {
    "t5gemma": ("t5gemma", t5gemma()),
    # the 9B-2B shape: a wider, deeper encoder than decoder; an untied head; no caps
    "t5gemma-unbalanced-untied": (
        "t5gemma",
        t5gemma(
            encoder=dict(
                hidden_size=48,
                num_hidden_layers=3,
                num_attention_heads=6,
                layer_types=["full_attention", "sliding_attention", "sliding_attention"],
            ),
            decoder=dict(
                num_hidden_layers=3,
                attn_logit_softcapping=None,
                final_logit_softcapping=None,
                rope_parameters={"rope_type": "default", "rope_theta": 100.0},
            ),
            tie_word_embeddings=False,
        ),
        {"lengths": (9, 5)},
    ),
}
