"""DeBERTa: disentangled c2p / p2c attention (distances clamped beyond max_relative_positions), heads."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    "deberta-c2p-p2c": (
        "deberta",
        dict(
            relative_attention=True,
            pos_att_type="c2p|p2c",
            max_relative_positions=4,  # shorter than the batch: the clamp is exercised
            type_vocab_size=2,
        ),
    ),
    "deberta-p2c-projected-untied": (
        "deberta",
        dict(
            relative_attention=True,
            pos_att_type=["p2c"],
            position_biased_input=False,
            embedding_size=24,
            tie_word_embeddings=False,
            hidden_act="gelu_new",
            pooler_hidden_act="tanh",
            num_labels=3,
        ),
    ),
    "deberta-absolute-lm-predictions": (
        "deberta",
        dict(legacy=False, pos_att_type="c2p"),
        {"heads": ("none", "masked-lm", "sentence-embedding")},
    ),
    "deberta-answers": (
        "deberta",
        dict(
            relative_attention=True,
            pos_att_type="c2p|p2c",
            max_relative_positions=4,
            type_vocab_size=2,
        ),
        {**SPAN_AND_CHOICE, "heads": ("question-answering",)},
    ),
}
