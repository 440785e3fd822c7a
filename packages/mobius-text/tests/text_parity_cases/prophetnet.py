"""ProphetNet's decoder alone (``ProphetNetForCausalLM``): no cross-attention; the logits are
predict stream 0's. ProphetNetConfig rejects ``num_hidden_layers``, so the case gives its own
config instead of TINY."""

CASES = {
    "prophetnet-causal": (
        "prophetnet",
        dict(
            vocab_size=128,
            hidden_size=64,
            num_encoder_layers=2,  # the reference cache is sized by it
            num_decoder_layers=2,
            num_encoder_attention_heads=4,
            num_decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_position_embeddings=64,
            ngram=2,
            num_buckets=8,
            relative_max_distance=16,
            pad_token_id=0,
        ),
        {"model_class": "ProphetNetForCausalLM", "tiny": False},
    ),
}
