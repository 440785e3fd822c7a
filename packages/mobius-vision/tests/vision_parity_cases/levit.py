"""LeViT: odd token grids (6 -> 3 -> 2), stages without MLPs, stem kernels, attention ratios.

``LevitForImageClassificationWithTeacher`` is checked in ``test_teacher_parity.py``
(``AutoModelForImageClassification`` makes the plain classifier).
"""

LEVIT = dict(
    image_size=96,
    hidden_sizes=[16, 24, 32],
    num_attention_heads=[2, 3, 4],
    depths=[1, 1, 1],
    key_dim=[8, 8, 8],
    mlp_ratio=[2, 2, 2],
    attention_ratio=[2, 2, 2],
    num_labels=3,
    # Four conv+BatchNorm stem layers at std 0.02 shrink the image ~1e4-fold under the
    # (perturbed) BatchNorm biases: the outputs would barely depend on the image.
    initializer_range=0.2,
)

CASES = {
    "levit": ("levit", LEVIT),
    "levit-no-mlp-kernel5-ratios-deep": (
        "levit",
        dict(
            LEVIT,
            image_size=64,
            kernel_size=5,
            padding=2,
            depths=[2, 1, 2],
            key_dim=[8, 4, 6],
            num_attention_heads=[4, 2, 3],
            mlp_ratio=[0, 3, 1],
            attention_ratio=[1, 3, 2],
            num_channels=4,
            initializer_range=0.1,  # deeper: 0.2 grows the activations to ~300
        ),
    ),
}
