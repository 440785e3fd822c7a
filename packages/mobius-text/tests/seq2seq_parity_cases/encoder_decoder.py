"""EncoderDecoderModel: bert2bert, roberta2roberta with a wider encoder (``enc_to_dec_proj``), bert2gpt2."""

BERT = dict(
    model_type="bert",
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=2,
    pad_token_id=0,
)
ROBERTA = dict(BERT, model_type="roberta", type_vocab_size=1, pad_token_id=1)
GPT2 = dict(
    model_type="gpt2",
    vocab_size=99,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_positions=64,
    bos_token_id=2,
    eos_token_id=3,
    pad_token_id=0,
    scale_attn_by_inverse_layer_idx=True,  # the cross-attention's scale too
)
AS_DECODER = dict(is_decoder=True, add_cross_attention=True)


def encoder_decoder(encoder, decoder, start):
    return dict(
        encoder=encoder,
        decoder=dict(decoder, **AS_DECODER),
        decoder_start_token_id=start,
        pad_token_id=decoder["pad_token_id"],
        vocab_size=decoder["vocab_size"],  # the harness draws source ids below it
    )


CASES = {
    "encoder_decoder-bert2bert": ("encoder-decoder", encoder_decoder(BERT, BERT, start=2)),
    # RoBERTa's decoder positions count from pad + 1; a 48-wide encoder needs the projection
    "encoder_decoder-roberta2roberta": (
        "encoder-decoder",
        encoder_decoder(
            dict(ROBERTA, hidden_size=48, num_attention_heads=6, num_hidden_layers=3),
            dict(ROBERTA, num_hidden_layers=3, hidden_act="gelu_new"),
            start=0,
        ),
        {"lengths": (9, 5)},
    ),
    # a 48-wide BERT encoder, projected for GPT-2's blocks with cross-attention
    "encoder_decoder-bert2gpt2": (
        "encoder-decoder",
        encoder_decoder(dict(BERT, hidden_size=48, num_attention_heads=6), GPT2, start=2),
    ),
}
