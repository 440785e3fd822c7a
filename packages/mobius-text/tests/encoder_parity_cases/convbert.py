"""ConvBERT: attention heads beside span-based dynamic convolution heads, grouped feed-forward layers."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    # two attention heads and two convolution heads, each window 9 tokens wide
    "convbert": ("convbert", dict(embedding_size=16, type_vocab_size=2)),
    # head_ratio above the head count leaves one attention head; feed-forward in two groups
    "convbert-grouped-one-head-untied": (
        "convbert",
        dict(
            embedding_size=32,
            intermediate_size=36,
            num_groups=2,
            head_ratio=8,
            conv_kernel_size=3,
            hidden_act="gelu_new",
            tie_word_embeddings=False,
            num_labels=3,
        ),
        {"heads": ("none", "masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    "convbert-answers-choices": (
        "convbert",
        dict(embedding_size=16, type_vocab_size=2),
        SPAN_AND_CHOICE,
    ),
}
