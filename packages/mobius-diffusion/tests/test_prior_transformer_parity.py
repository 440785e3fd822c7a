"""PriorTransformer (Kandinsky 2.x, unCLIP) against diffusers: the predicted image embedding
under the causal and padding mask, and the post-processing of the final latents."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.prior_transformer import PriorTransformerConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

# Kandinsky 2.2's prior (prior/config.json as the hub holds it, scaled down): norm_in, GELU time
KANDINSKY = dict(
    num_attention_heads=2,
    attention_head_dim=8,
    num_layers=2,
    embedding_dim=24,
    num_embeddings=7,
    additional_embeddings=4,
    norm_in_type="layer",
    time_embed_act_fn="gelu",
)
CASES = {
    "kandinsky": KANDINSKY,
    # unCLIP's defaults (no norm_in, SiLU), and what else a config sizes: the projected
    # embedding's own width and norm, the time embedding's width, the output's width
    "projections": dict(
        KANDINSKY,
        norm_in_type=None,
        time_embed_act_fn="silu",
        embedding_proj_norm_type="layer",
        embedding_proj_dim=20,
        time_embed_dim=40,
        clip_embed_dim=12,
    ),
}

prior_reference = DIFFUSERS_CALLS["PriorTransformer"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_prior_transformer_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    width, proj = (
        config["embedding_dim"],
        config.get("embedding_proj_dim") or config["embedding_dim"],
    )
    clip = config.get("clip_embed_dim") or width
    mask = np.ones((2, 7), np.int64)
    mask[1, 4:] = 0  # the second prompt is shorter: its last three tokens are padding
    feed = {
        "hidden_states": rng.standard_normal((2, width)).astype(np.float32),
        "timestep": np.array([3.0, 800.0], np.float32),
        "proj_embedding": rng.standard_normal((2, proj)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 7, width)).astype(np.float32),
        "attention_mask": mask,
    }
    post = {"latents": rng.standard_normal((2, clip)).astype(np.float32)}
    results = check_diffusion_parity(
        "PriorTransformer",
        config,
        {"model": feed, "post_process/model": post},
        prior_reference,
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "kandinsky":  # --validate's sample feeds (a padded text mask) pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"added_emb_type": None}, "added_emb_type None"),
        ({"encoder_hid_proj_type": None}, "encoder_hid_proj_type None"),
        ({"additional_embeddings": 3}, "additional_embeddings 3"),
        ({"norm_in_type": "group"}, "norm_in_type 'group'"),
        ({"time_embed_act_fn": "mish"}, "activation 'mish'"),
        ({"num_layers": 0}, "num_layers must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "PriorTransformer", **KANDINSKY, **change}
    with pytest.raises(ConfigError, match=named):
        PriorTransformerConfig.from_hf(ComponentConfig(fields))
