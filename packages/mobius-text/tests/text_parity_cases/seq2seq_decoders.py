"""Decoders of encoder-decoders alone (transformers' ``*ForCausalLM``): no encoder states, so
no cross-attention; positions count the tokens before these (transformers: the cache's length)."""

SEQ2SEQ = dict(
    d_model=64,
    decoder_layers=2,
    decoder_attention_heads=4,
    decoder_ffn_dim=128,
    encoder_layers=1,
    encoder_attention_heads=4,
    encoder_ffn_dim=128,
)

CASES = {
    "bart-causal": ("bart", SEQ2SEQ, {"model_class": "BartForCausalLM"}),
    "plbart-causal": ("plbart", SEQ2SEQ, {"model_class": "PLBartForCausalLM"}),
    "mbart-causal": ("mbart", SEQ2SEQ, {"model_class": "MBartForCausalLM"}),
    "marian-causal": ("marian", SEQ2SEQ, {"model_class": "MarianForCausalLM"}),
    "pegasus-causal": ("pegasus", SEQ2SEQ, {"model_class": "PegasusForCausalLM"}),
    "blenderbot-causal": ("blenderbot", SEQ2SEQ, {"model_class": "BlenderbotForCausalLM"}),
    "blenderbot-small-causal": (
        "blenderbot-small",
        SEQ2SEQ,
        {"model_class": "BlenderbotSmallForCausalLM"},
    ),
    # block_sparse (the default) is the encoder's attention: the decoder alone attends in full
    "bigbird-pegasus-causal": (
        "bigbird_pegasus",
        {**SEQ2SEQ, "use_bias": True},
        {"model_class": "BigBirdPegasusForCausalLM"},
    ),
}
