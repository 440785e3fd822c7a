"""The tiny towers and decoders most vision–language cases share (a family changes a field)."""

TOWER = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
)
CLIP = dict(TOWER, model_type="clip_vision_model")
SIGLIP = dict(TOWER, model_type="siglip_vision_model")
TEXT = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=256,
)
LLAMA = dict(TEXT, model_type="llama")
