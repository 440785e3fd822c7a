"""WanVACETransformer3DModel parity: the VACE blocks over the control latents, their hints
added after the chosen layers with a scale each.

The layers are listed out of order (diffusers hands the hints out in layer order), and one
case's control video is a frame short (its tokens are zero-padded at the end).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.cli import main
from mobius.errors import ConfigError
from mobius_diffusion.models.wan_vace import WanVACEConfig
from mobius_diffusion.testing import (
    DIFFUSERS_CALLS,
    check_diffusion_parity,
    make_random_diffusers_model,
)

BASE = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=12,
    in_channels=4,
    out_channels=4,
    text_dim=12,
    freq_dim=16,
    ffn_dim=32,
    num_layers=3,
    rope_max_seq_len=32,
    vace_layers=[2, 0],
    vace_in_channels=6,
)
CASES = {
    # (config, text tokens, control frames of the video's 3)
    "t2v": (BASE, 5, 3),
    "short-control": (dict(BASE, vace_layers=[0], cross_attn_norm=False), 5, 2),
    "i2v": (dict(BASE, image_dim=20, added_kv_proj_dim=24), 512, 3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wan_vace_parity(case, tmp_path):
    config, text_tokens, control_frames = CASES[case]
    rng = np.random.default_rng(0)
    layers = len(config["vace_layers"])
    feed = {
        "hidden_states": rng.standard_normal((2, 4, 3, 4, 6)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, text_tokens, 12)).astype(np.float32),
        "timestep": np.array([10.0, 700.0], np.float32),
        "control_hidden_states": rng.standard_normal((2, 6, control_frames, 4, 6)).astype(
            np.float32
        ),
        "control_hidden_states_scale": np.array([0.7, 1.3][:layers], np.float32),
    }
    if config.get("image_dim"):
        image = rng.standard_normal((2, 7, config["image_dim"])).astype(np.float32)
        feed["encoder_hidden_states_image"] = image
    results = check_diffusion_parity(
        "WanVACETransformer3DModel",
        config,
        {"model": feed},
        DIFFUSERS_CALLS["WanVACETransformer3DModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])


def test_wan_vace_validates(tmp_path):
    """``mobius build --validate``: samples.py's control latents and scales, against diffusers'
    own reading of the directory."""
    source, out = tmp_path / "hf", tmp_path / "out"
    make_random_diffusers_model("WanVACETransformer3DModel", BASE).save_pretrained(source)
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True and validation["diffs"], validation
    print(validation["diffs"])


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    "change",
    [
        dict(vace_layers=[1, 2]),  # no layer 0
        dict(vace_layers=[0, 3]),  # past num_layers
        dict(vace_layers=[0, 0]),
        dict(vace_layers="0"),
    ],
)
def test_wan_vace_refuses_what_it_does_not_build(change):
    with pytest.raises(ConfigError, match="vace_layers"):
        WanVACEConfig.from_hf(_Fields(**dict(BASE, **change)))


def test_wan_vace_refuses_a_bad_channel_count():
    with pytest.raises(ConfigError, match="vace_in_channels"):
        WanVACEConfig.from_hf(_Fields(**dict(BASE, vace_in_channels=0)))
