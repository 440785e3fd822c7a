"""MiniCPM-V 4.7: MiniCPM-V 4.6's case with canvas M-RoPE in Qwen3.5's decoder (interleaved
sections over half of each head), the positions from the model's own ``get_rope_index``.

The tokenizer splits ``"\\n"`` (which ends each row of slices, and which the canvas pins)
as a token of its own, and the config names the markers' ids, as the hub's does.
"""

from transformers import MiniCPMV4_7Processor

from .minicpmv4_6 import (
    NAMED_TOKENS,
    OPTIONS,
    QWEN3_5_TEXT,
    SPECIAL_TOKENS,
    Int64TargetSizes,
    MiniCPMProcessorMaker,
    VideoProcessorUnchecked,
    minicpm_config,
)

CANVAS_TOKENS = dict(SPECIAL_TOKENS, **{"\n": 90})
TEXT = dict(
    QWEN3_5_TEXT,
    # 16 of 32 channels rotate: 8 pairs over time, height and width (interleaved)
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "mrope_section": [2, 3, 3],
    },
)
MARKERS = dict(
    image_start_id=CANVAS_TOKENS[NAMED_TOKENS["image_start_token"]],
    image_end_id=CANVAS_TOKENS[NAMED_TOKENS["image_end_token"]],
    slice_start_id=CANVAS_TOKENS[NAMED_TOKENS["slice_start_token"]],
    slice_end_id=CANVAS_TOKENS[NAMED_TOKENS["slice_end_token"]],
    newline_id=CANVAS_TOKENS["\n"],
)


class ImageMiniCPMV4_7Processor(Int64TargetSizes, VideoProcessorUnchecked, MiniCPMV4_7Processor):
    pass


class MiniCPMV4_7ProcessorMaker(MiniCPMProcessorMaker):
    processor_class = ImageMiniCPMV4_7Processor
    special_tokens = CANVAS_TOKENS


def canvas_positions(model, inputs):
    """``(positions [3, batch, sequence], deltas [batch, 1])`` of the model's ``get_rope_index``."""
    import torch

    names = ("input_ids", "mm_token_type_ids", "target_sizes", "attention_mask")
    tensors = {name: torch.from_numpy(inputs[name]) for name in names}
    positions, deltas = model.model.get_rope_index(**tensors)
    return positions.numpy(), deltas.numpy()


CASES = {
    "minicpmv4_7-canvas-mrope": (
        "minicpmv4_7",
        minicpm_config("minicpmv4_7", text=TEXT, **MARKERS),
        MiniCPMV4_7ProcessorMaker(),
        # a wide image (one row of slices) and a larger one (rows that newlines end)
        dict(OPTIONS, image_sizes=((37, 45), (70, 50)), rope_positions=canvas_positions),
    ),
}
