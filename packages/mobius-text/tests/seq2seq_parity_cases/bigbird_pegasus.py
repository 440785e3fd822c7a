"""BigBird-Pegasus with full attention: pre-norm layers, BigBird's encoder attention, a closing LayerNorm."""

from seq2seq_parity_cases.bart import BART

BIGBIRD_PEGASUS = dict(
    BART,
    attention_type="original_full",
    scale_embedding=True,
    pad_token_id=0,
    decoder_start_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)

CASES = {
    "bigbird_pegasus": ("bigbird_pegasus", BIGBIRD_PEGASUS),
    "bigbird_pegasus-bias-untied": (
        "bigbird_pegasus",
        dict(
            BIGBIRD_PEGASUS,
            use_bias=True,
            tie_word_embeddings=False,
            activation_function="relu",
            eos_token_id=98,  # seed 0 greedily picks token 1: generate would refuse it (min_new_tokens)
        ),
    ),
}
