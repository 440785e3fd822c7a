"""The BART lineage: mBART and PLBART, Marian, Pegasus, Blenderbot (and small), M2M-100."""

from seq2seq_parity_cases.bart import BART

CASES = {
    "plbart": ("plbart", dict(BART, scale_embedding=True)),
    "mbart": ("mbart", dict(BART, scale_embedding=True)),
    "marian": (
        "marian",
        dict(BART, scale_embedding=True, pad_token_id=98, decoder_start_token_id=98),
    ),
    "marian-own-decoder-vocab": (
        "marian",
        dict(
            BART,
            scale_embedding=True,
            share_encoder_decoder_embeddings=False,
            decoder_vocab_size=77,
            pad_token_id=76,
            decoder_start_token_id=76,
        ),
    ),
    "pegasus": (
        "pegasus",
        dict(BART, scale_embedding=True, pad_token_id=0, decoder_start_token_id=0),
    ),
    "blenderbot": ("blenderbot", dict(BART, decoder_start_token_id=1)),
    "blenderbot-small": ("blenderbot-small", dict(BART, decoder_start_token_id=1)),
    # pad 1 and start 2, as the real models: generated pads take the zero position row.
    "m2m_100": ("m2m_100", dict(BART, scale_embedding=True)),
}
