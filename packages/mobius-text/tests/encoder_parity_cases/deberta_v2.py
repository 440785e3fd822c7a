"""DeBERTa-v2/v3: log-bucketed distances, shared position projections, normalised table, conv layer."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "deberta-v3-buckets-shared-keys": (
        "deberta-v2",
        dict(
            relative_attention=True,
            pos_att_type="p2c|c2p",
            position_buckets=8,  # distances beyond 4 fall into log buckets
            share_att_key=True,
            norm_rel_ebd="layer_norm",
            position_biased_input=False,
            max_relative_positions=-1,
        ),
        {"lengths": (20, 9)},
    ),
    "deberta-v2-conv-clamped": (
        "deberta-v2",
        dict(
            relative_attention=True,
            pos_att_type=["c2p", "p2c"],
            max_relative_positions=4,  # no buckets, distances clamped
            conv_kernel_size=3,
            conv_groups=2,
            conv_act="gelu",
            type_vocab_size=2,
            tie_word_embeddings=False,
        ),
    ),
    "deberta-v2-absolute-lm-predictions": (
        "deberta-v2",
        dict(legacy=False, hidden_act="relu", num_labels=3),
        {"heads": ("masked-lm", "sequence-classification")},
    ),
    "deberta-v2-answers-choices": (
        "deberta-v2",
        dict(
            relative_attention=True,
            pos_att_type="p2c|c2p",
            position_buckets=8,
            share_att_key=True,
            norm_rel_ebd="layer_norm",
            pooler_hidden_act="tanh",
        ),
        SPAN_AND_CHOICE,
    ),
}
