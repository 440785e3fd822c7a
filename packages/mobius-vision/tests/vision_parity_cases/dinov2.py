"""DINOv2: layer scale, ``mlp_ratio`` MLP or SwiGLU, class-token pooling, ``[cls, mean]`` classifier."""

DINOV2 = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    mlp_ratio=3,
    image_size=32,
    patch_size=8,
    num_labels=3,
)

CASES = {
    "dinov2": ("dinov2", DINOV2),
    "dinov2-swiglu-no-qkv-bias-4ch": (
        "dinov2",
        dict(DINOV2, use_swiglu_ffn=True, qkv_bias=False, num_channels=4, image_size=40),
    ),
}
