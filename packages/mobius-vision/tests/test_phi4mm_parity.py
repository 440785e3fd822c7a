"""Phi-4-multimodal's image path against PyTorch (``Phi4MultimodalForCausalLM``).

A batch of two prompts, each with one image of its own grid (2x1 with padded rows,
1x2 with padded columns: the HD transform's cut and row ends differ per image), goes
through the real ``Phi4MultimodalProcessor`` (:mod:`phi4mm_case`); the tiny perturbed
model is built with the CLI in both forms and both eps, prefill and 8 cached decode
steps compared. Audio is not built yet (the package takes none), so no clips are passed.
"""

from __future__ import annotations

import pytest
from phi4mm_case import IMAGE_SIZES, PROMPTS, phi4mm_config, phi4mm_processor

from mobius_vision.testing import check_audio_vision_language_parity


def images_only(processor):
    """``processor`` called as the kit calls it, with the audio (none) left out."""

    def call(*, audio, **kwargs):
        assert not audio
        return processor(**kwargs)

    return call


#: case -> (model_type,): the layout scripts/support_table.py reads
CASES = {"phi4_multimodal-images": ("phi4_multimodal",)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_phi4_multimodal_image_parity(case, tmp_path):
    config = phi4mm_config()
    results = check_audio_vision_language_parity(
        config,
        images_only(phi4mm_processor(config)),
        tmp_path,
        model_class="Phi4MultimodalForCausalLM",
        prompts=PROMPTS,
        image_sizes=IMAGE_SIZES,
        clip_lengths=(),
    )
    assert len(results) == 4
    print({r.ep: f"{r.max_diff:.1e}" for r in results})
