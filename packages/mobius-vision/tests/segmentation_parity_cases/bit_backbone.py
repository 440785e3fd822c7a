"""BiT as a dense backbone (DPT-Hybrid's stem): TF-SAME bottlenecks with the dynamic stem
padding DPT-Hybrid uses, and the pre-activation form (its final norm unread)."""

from depth_parity_cases.dpt_hybrid import BIT_BACKBONE

BACKBONE_CASES = {
    "bit-backbone-hybrid": ("bit", dict(BIT_BACKBONE, image_size=64)),
    "bit-backbone-preactivation": (
        "bit",
        dict(
            BIT_BACKBONE,
            image_size=48,
            layer_type="preactivation",
            hidden_sizes=[16, 32, 64],  # its final norm is as wide as the last listed width
            global_padding=None,
            embedding_dynamic_padding=False,
            out_features=["stem", "stage2"],
        ),
    ),
}
