"""Cosmos3 Omni: Qwen3-VL's classes under ``cosmos3_omni`` (its own config class), over the
``Qwen3VLProcessor`` its checkpoints name; two image sizes, DeepStack from blocks out of
order, M-RoPE positions from the model's ``get_rope_index``."""

from vl_parity_cases.qwen2_vl import OPTIONS, out_hidden_config
from vl_parity_cases.qwen3_vl import QWEN3_TEXT, VISION, qwen3_vl_processor

CASES = {
    "cosmos3_omni-deepstack-two-sizes": (
        "cosmos3_omni",
        out_hidden_config("cosmos3_omni", VISION, QWEN3_TEXT),
        qwen3_vl_processor,
        OPTIONS,
    ),
}
