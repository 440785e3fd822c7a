"""GLPN: two-stage tiny hierarchical encoder (shrunk keys in the first), selective fusion."""

GLPN = dict(
    num_encoder_blocks=4,
    depths=[1, 1, 1, 1],
    sr_ratios=[4, 2, 1, 1],
    hidden_sizes=[8, 16, 16, 32],
    patch_sizes=[7, 3, 3, 3],
    strides=[4, 2, 2, 2],
    num_attention_heads=[1, 2, 2, 4],
    mlp_ratios=[2, 2, 2, 2],
    decoder_hidden_size=16,
    max_depth=10,
    initializer_range=0.1,  # the default 0.02 leaves a depth that barely depends on the image
)

CASES = {
    # 64 x 96: multiples of 32, as GLPN's image processor makes them.
    "glpn": ("glpn", GLPN, dict(image_size=(64, 96))),
}
