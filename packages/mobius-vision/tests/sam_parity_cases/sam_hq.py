"""SAM-HQ: the tiny SAM with the HQ decoder (vit_dim: the encoder's hidden_size)."""

import copy

from sam_parity_cases.sam import SAM_OVERRIDES

SAM_HQ_OVERRIDES = copy.deepcopy(SAM_OVERRIDES)
SAM_HQ_OVERRIDES["mask_decoder_config"]["vit_dim"] = 32

CASES = {"sam_hq": ("sam_hq", SAM_HQ_OVERRIDES, {"model_class": "SamHQModel"})}
