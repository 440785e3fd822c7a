"""PEGASUS-X: block-local encoder attention with global tokens, staggered blocks on odd layers,
computed sinusoids, bias-free attention. Sources of 7 and 4 tokens over blocks of 4 cover
the padding to a whole block, a block of pads only, and the half-block shift."""

from seq2seq_parity_cases.bart import BART

PEGASUS_X = dict(
    BART,
    encoder_layers=3,  # layers 1 is staggered; 0 and 2 are not
    num_global_tokens=3,
    block_size=4,
    scale_embedding=True,
    pad_token_id=0,
    decoder_start_token_id=0,
    eos_token_id=1,
)

CASES = {
    "pegasus_x": ("pegasus_x", PEGASUS_X),
    "pegasus_x-unstaggered-untied": (
        "pegasus_x",
        dict(
            PEGASUS_X,
            stagger_local_blocks=False,
            tie_word_embeddings=False,
            scale_embedding=False,
            block_size=2,
            activation_function="relu",
        ),
    ),
}
