"""DPT over a BEiT backbone (Intel/dpt-beit-*): its relative position tables resampled to a
non-square image's patch grid."""

from depth_parity_cases.dpt import DPT
from depth_parity_cases.zoedepth import BEIT_BACKBONE

CASES = {
    "dpt-beit-backbone": (
        "dpt",
        dict(DPT, backbone_config=BEIT_BACKBONE),
        dict(image_size=(24, 36)),
    ),
}
