"""DeiT: class and distillation tokens; the bare model's pooler to ``pooler_output_size``.

``DeiTForImageClassificationWithTeacher`` is checked in ``test_teacher_parity.py``
(``AutoModelForImageClassification`` makes the plain classifier).
"""

DEIT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    image_size=32,
    patch_size=8,
    num_labels=3,
)

CASES = {
    "deit": ("deit", DEIT),
    "deit-pooler-size-no-qkv-bias-gelu-new-wide": (
        "deit",
        dict(
            DEIT,
            qkv_bias=False,
            hidden_act="gelu_new",
            pooler_output_size=24,
            pooler_act="relu",
            image_size=[24, 40],
            num_channels=4,
        ),
    ),
}
