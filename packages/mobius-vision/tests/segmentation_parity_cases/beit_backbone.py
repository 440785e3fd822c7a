"""BEiT as a dense backbone (ZoeDepth's, DPT-BEiT's): token and map outputs, the embeddings
among them, the final norm unread, the layers past the last one read left out."""

from depth_parity_cases.zoedepth import BEIT_BACKBONE

BACKBONE_CASES = {
    "beit-backbone-tokens": ("beit", {k: v for k, v in BEIT_BACKBONE.items() if k != "model_type"}),
    "beit-backbone-maps-stem-layernorm": (
        "beit",
        dict(
            {k: v for k, v in BEIT_BACKBONE.items() if k != "model_type"},
            reshape_hidden_states=True,
            out_features=["stem", "stage2", "stage3"],
            use_mean_pooling=False,
        ),
    ),
}
