"""Funnel: pooled blocks, relative attention with token-type terms, the upsampling decoder."""

from encoder_parity_cases import OMIT

# TINY's num_hidden_layers is a read-only property of FunnelConfig (the block sizes' sum)
FUNNEL = dict(num_hidden_layers=OMIT, block_sizes=[1, 2], d_head=8, d_inner=37, type_vocab_size=3)

CASES = {
    # rows of 7 and 4 tokens pooled to 4 (<cls> apart, last token dropped); type 2 is <cls>.
    # The bare FunnelModel ("none") is the states every head here checks (AutoModel fails on
    # funnel's two base classes when the config names no architecture).
    "funnel": (
        "funnel",
        dict(FUNNEL),
        {"heads": ("masked-lm", "token-classification", "question-answering")},
    ),
    # factorized attention, max pooling, pooled keys too, no <cls> apart, a repeated block, untied
    "funnel-factorized-max-untied": (
        "funnel",
        dict(
            FUNNEL,
            block_sizes=[1, 1, 1],
            block_repeats=[2, 1, 1],
            attention_type="factorized",
            pooling_type="max",
            pool_q_only=False,
            separate_cls=False,
            tie_word_embeddings=False,
            hidden_act="relu",
        ),
        {"heads": ("masked-lm",), "lengths": (9, 6)},
    ),
}
