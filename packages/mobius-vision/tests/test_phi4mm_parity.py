"""Phi-4-multimodal against PyTorch (``Phi4MultimodalForCausalLM``): images, audio, both.

Each case puts a batch of two prompts through the real ``Phi4MultimodalProcessor``
(:mod:`phi4mm_case`): images of their own grids (2x1 with padded rows, 1x2 with padded
columns: the HD transform's cut and row ends differ per image), audio clips of 1 s and
0.44 s (the shorter padded: the encoder sees its padding as transformers does), and
both. The tiny perturbed model is built with the CLI in both forms and both eps,
prefill and 8 cached decode steps compared (1e-4). With images the audio goes through
the vision-speech projections, without them through the speech ones (transformers
picks them by the images; the graph by ``audio_projection_mode``).
"""

from __future__ import annotations

import pytest
from phi4mm_case import (
    CLIP_LENGTHS,
    HEARING_PROMPTS,
    IMAGE_SIZES,
    PROMPTS,
    SEEING_PROMPTS,
    phi4mm_config,
    phi4mm_processor,
    reference_prefill,
    with_graph_names,
)

from mobius_vision.testing import check_audio_vision_language_parity

#: case -> (model_type, prompts, image sizes, clip lengths): scripts/support_table.py
#: reads the model type
CASES = {
    "phi4_multimodal-images": ("phi4_multimodal", PROMPTS, IMAGE_SIZES, ()),
    "phi4_multimodal-audio": ("phi4_multimodal", HEARING_PROMPTS, (), CLIP_LENGTHS),
    "phi4_multimodal-images-audio": (
        "phi4_multimodal",
        SEEING_PROMPTS,
        IMAGE_SIZES,
        CLIP_LENGTHS,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_phi4_multimodal_parity(case, tmp_path):
    _model_type, prompts, image_sizes, clip_lengths = CASES[case]
    config = phi4mm_config()
    results = check_audio_vision_language_parity(
        config,
        with_graph_names(phi4mm_processor(config)),
        tmp_path,
        model_class="Phi4MultimodalForCausalLM",
        prompts=prompts,
        image_sizes=image_sizes,
        clip_lengths=clip_lengths,
        prefill_model=reference_prefill,
    )
    assert len(results) == 4
    print({r.ep: f"{r.max_diff:.1e}" for r in results})
