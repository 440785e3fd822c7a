"""Chroma transformer parity against diffusers, with the pipeline's text padding mask."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.chroma import ChromaConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CONFIG = dict(
    patch_size=1,
    in_channels=8,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=12,
    axes_dims_rope=[4, 6, 6],
    approximator_num_channels=16,
    approximator_hidden_dim=24,
    approximator_layers=2,
)


def chroma_inputs() -> dict[str, np.ndarray]:
    """Packed latents of a 4x6 grid, a 5-token prompt, the second one padded after 2 tokens."""
    rng = np.random.default_rng(0)
    rows, cols = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    img_ids = np.stack([np.zeros(24), rows.ravel(), cols.ravel()], axis=1).astype(np.float32)
    # The pipeline keeps the prompt and its first pad token, then every image token.
    mask = np.ones((2, 5 + 24), np.float32)
    mask[1, 3:5] = 0
    return {
        "hidden_states": rng.standard_normal((2, 24, 8)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "timestep": np.array([0.25, 0.8], np.float32),
        "img_ids": img_ids,
        # Chroma pipelines pass zeros; distinct ids exercise the text rotation too.
        "txt_ids": rng.integers(0, 4, (5, 3)).astype(np.float32),
        "attention_mask": mask,
    }


def test_chroma_parity(tmp_path):
    results = check_diffusion_parity(
        "ChromaTransformer2DModel",
        CONFIG,
        {"model": chroma_inputs()},
        DIFFUSERS_CALLS["ChromaTransformer2DModel"],
        tmp_path,
    )
    # measured: 1.1e-5 at output scale 2.2 (--ep default and cpu)
    print([(r.ep, r.diffs) for r in results])
    # --validate's sample feeds (a padded prompt) fit the graph, and pass
    report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
    assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"approximator_num_channels": 12}, "approximator_num_channels 12 is not built"),
        ({"axes_dims_rope": [4, 4, 4]}, "axes_dims_rope"),
        ({"approximator_layers": "2"}, "approximator_layers must be a positive integer"),
        ({"out_channels": 0}, "out_channels must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "ChromaTransformer2DModel", **CONFIG, **change}
    with pytest.raises(ConfigError, match=named):
        ChromaConfig.from_hf(ComponentConfig(fields))


def test_row_sinusoids_match_diffusers_at_hub_size():
    """Chroma1's 344 rows reach position 343000, where the tiny model's 32 rows do not:
    the constant part of the approximator's input is checked there against diffusers."""
    import torch
    from diffusers.models.transformers.transformer_chroma import (
        ChromaCombinedTimestepTextProjEmbeddings as Reference,
    )

    from mobius_diffusion.models.chroma import ChromaCombinedTimestepTextProjEmbeddings

    ours = ChromaCombinedTimestepTextProjEmbeddings(16, 344).constant[0]
    reference = Reference(16, 344)(torch.zeros(1))[0].numpy()  # [rows, t | guidance | row]
    np.testing.assert_allclose(ours, reference[:, 16:], rtol=0, atol=1e-6)
