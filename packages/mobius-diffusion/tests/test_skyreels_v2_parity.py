"""SkyReelsV2Transformer3DModel parity: Wan's transformer with SkyReels' float64 timestep
sinusoid, the fps embedding (``inject_sample_info``), I2V's image states, and diffusion
forcing: per-frame timesteps with block-causal self-attention (``num_frame_per_block``).

Diffusion forcing is mobius' ``"diffusion_forcing": true`` in ``config.json`` (diffusers takes
it as a call argument), so that case writes the field into the saved component.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import build_with_cli
from mobius_diffusion.models.skyreels_v2 import SkyReelsV2Config
from mobius_diffusion.testing import (
    DIFFUSERS_CALLS,
    DiffusionParity,
    check_diffusion_parity,
    compare_graph,
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
    num_layers=2,
    rope_max_seq_len=32,
)
CASES = {
    # (config, text tokens, mobius' own config.json fields)
    "t2v": (BASE, 5, {}),
    "fps": (dict(BASE, inject_sample_info=True, cross_attn_norm=False), 5, {}),
    "i2v": (dict(BASE, image_dim=20, added_kv_proj_dim=24), 512, {}),
    "diffusion-forcing": (
        dict(BASE, inject_sample_info=True, num_frame_per_block=2),
        5,
        {"diffusion_forcing": True},
    ),
}
FRAMES = 4


def _feed(config, text_tokens, forcing):
    rng = np.random.default_rng(0)
    feed = {
        "hidden_states": rng.standard_normal((2, 4, FRAMES, 4, 6)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, text_tokens, 12)).astype(np.float32),
        # a fractional step: the float64 sinusoid is what diffusers computes
        "timestep": np.array([10.0, 999.7], np.float32),
    }
    if forcing:  # the earlier blocks of frames less noisy
        feed["timestep"] = np.array([[0, 0, 420.5, 420.5], [250, 250, 999, 999]], np.float32)
    if config.get("inject_sample_info"):
        feed["fps"] = np.array([1, 0], np.int64)
    if config.get("image_dim"):
        image = rng.standard_normal((2, 7, config["image_dim"])).astype(np.float32)
        feed["encoder_hidden_states_image"] = image
    return feed


def _check_with_fields(config, fields, feed, tmp_path):
    """check_diffusion_parity, with ``fields`` written into the saved ``config.json``."""
    import onnxruntime as ort
    import torch

    model = make_random_diffusers_model("SkyReelsV2Transformer3DModel", config)
    source = tmp_path / "hf"
    model.save_pretrained(source)
    saved = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**saved, **fields}))
    with torch.no_grad():
        torch_feed = {k: torch.from_numpy(v) for k, v in feed.items()}
        expected = DIFFUSERS_CALLS["SkyReelsV2Transformer3DModel"](model, "model", torch_feed)
    results = []
    for ep in ("default", "cpu"):
        out = build_with_cli(source, tmp_path / f"onnx-{ep}", "--ep", ep)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        result = DiffusionParity(
            ep,
            {
                "model:out_hidden_states": compare_graph(session, feed, expected)[
                    "out_hidden_states"
                ]
            },
        )
        result.assert_close()
        results.append(result)
    return results


@pytest.mark.parametrize("case", sorted(CASES))
def test_skyreels_v2_parity(case, tmp_path):
    config, text_tokens, fields = CASES[case]
    feed = _feed(config, text_tokens, fields.get("diffusion_forcing", False))
    if fields:
        results = _check_with_fields(config, fields, feed, tmp_path)
    else:
        results = check_diffusion_parity(
            "SkyReelsV2Transformer3DModel",
            config,
            {"model": feed},
            DIFFUSERS_CALLS["SkyReelsV2Transformer3DModel"],
            tmp_path,
        )
    print(case, [(r.ep, r.diffs) for r in results])


def test_skyreels_v2_forcing_validates(tmp_path):
    """``mobius build --validate`` of a diffusion-forcing model with fps: samples.py's per-frame
    timesteps and fps, against diffusers' own reading of the directory."""
    source, out = tmp_path / "hf", tmp_path / "out"
    config, _, fields = CASES["diffusion-forcing"]
    make_random_diffusers_model("SkyReelsV2Transformer3DModel", config).save_pretrained(source)
    saved = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**saved, **fields}))
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True and validation["diffs"], validation
    print(validation["diffs"])


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(num_frame_per_block=0), "num_frame_per_block"),
        (dict(inject_sample_info="yes"), "inject_sample_info"),
        (dict(diffusion_forcing=1), "diffusion_forcing"),
        (dict(expand_timesteps=True), "expand_timesteps"),
        (dict(freq_dim=15), "freq_dim"),
    ],
)
def test_skyreels_v2_refuses_what_it_does_not_build(change, named):
    with pytest.raises(ConfigError, match=named):
        SkyReelsV2Config.from_hf(_Fields(**dict(BASE, **change)))
