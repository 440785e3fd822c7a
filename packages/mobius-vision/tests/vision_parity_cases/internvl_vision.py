"""InternVL's vision tower: the default (layer norms, positions, mean pooling so no final norm),
q/k norms with RMS norms, attention biases and the final layernorm, and a non-square image
without a position table."""

INTERNVL_VISION = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=16,
    patch_size=4,
)

CASES = {
    "internvl_vision": ("internvl_vision", INTERNVL_VISION, dict(heads=("none",))),
    "internvl_vision-qk-norm-rms-bias-final-norm-mask-token": (
        "internvl_vision",
        dict(
            INTERNVL_VISION,
            use_qk_norm=True,
            norm_type="rms_norm",
            attention_bias=True,
            use_mean_pooling=False,
            use_mask_token=True,
            layer_norm_eps=1e-5,
            hidden_act="quick_gelu",
        ),
        dict(heads=("none",)),
    ),
    "internvl_vision-no-positions-16x24-3-layers": (
        "internvl_vision",
        dict(
            INTERNVL_VISION,
            image_size=[16, 24],
            use_absolute_position_embeddings=False,
            num_hidden_layers=3,
        ),
        dict(heads=("none",)),
    ),
}
