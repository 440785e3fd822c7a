"""X-MOD: RoBERTa with per-language adapters; the graph serves the config's default language."""

from encoder_parity_cases import SPAN_AND_CHOICE

CASES = {
    # the default language is the second adapter: the graph must pick it by name
    "xmod": (
        "xmod",
        dict(
            type_vocab_size=2,
            pad_token_id=1,
            languages=["en_XX", "de_DE"],
            default_language="de_DE",
        ),
    ),
    "xmod-pre-norm-adapter-norm-untied-relu": (
        "xmod",
        dict(
            type_vocab_size=1,
            pad_token_id=1,
            languages=["en_XX", "ro_RO", "fi_FI"],
            default_language="ro_RO",
            pre_norm=True,
            adapter_reduction_factor=4,
            adapter_layer_norm=True,
            ln_before_adapter=False,
            tie_word_embeddings=False,
            hidden_act="relu",
            num_labels=3,
        ),
        {"heads": ("masked-lm", "sequence-classification", "sentence-embedding")},
    ),
    # no norm before the adapter at all (neither its own nor the reused one)
    "xmod-adapter-no-norm": (
        "xmod",
        dict(
            type_vocab_size=1,
            pad_token_id=1,
            languages=["en_XX"],
            default_language="en_XX",
            adapter_reuse_layer_norm=False,
            ln_before_adapter=False,
        ),
        {"heads": ("none", "token-classification")},
    ),
    "xmod-answers-choices": (
        "xmod",
        dict(
            type_vocab_size=1,
            pad_token_id=1,
            languages=["en_XX", "de_DE"],
            default_language="de_DE",
        ),
        SPAN_AND_CHOICE,
    ),
}
