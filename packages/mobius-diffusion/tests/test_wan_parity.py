"""WanTransformer3DModel parity: Wan 2.1 T2V, I2V (CLIP image states), first-last-frame
(two images' states joined, ``pos_embed``), a 2.2-style layout and TI2V's per-token
timesteps.

The rotary tables are built in the graph from the patch grid; diffusers builds its
own, so the inputs are the transformer's only. I2V's text is 512 tokens, the length
diffusers' attention cuts the context at (what the Wan pipelines pad the prompt to).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import build_with_cli
from mobius_diffusion.models.wan import WanConfig
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
    # (config, text tokens, frames)
    "t2v": (BASE, 5, 3),
    "i2v": (dict(BASE, image_dim=20, added_kv_proj_dim=24), 512, 2),
    "flf2v": (dict(BASE, image_dim=20, added_kv_proj_dim=24, pos_embed_seq_len=14), 512, 2),
    "2.2-layout": (dict(BASE, patch_size=(2, 2, 2), cross_attn_norm=False, out_channels=6), 5, 4),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wan_parity(case, tmp_path):
    config, text_tokens, frames = CASES[case]
    rng = np.random.default_rng(0)
    feed = {
        "hidden_states": rng.standard_normal((2, 4, frames, 4, 6)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, text_tokens, 12)).astype(np.float32),
        "timestep": np.array([10.0, 700.0], np.float32),
    }
    if config.get("image_dim"):
        rows = 4 if config.get("pos_embed_seq_len") else 2  # first-last: two images per row
        image = rng.standard_normal((rows, 7, config["image_dim"])).astype(np.float32)
        feed["encoder_hidden_states_image"] = image
    results = check_diffusion_parity(
        "WanTransformer3DModel",
        config,
        {"model": feed},
        DIFFUSERS_CALLS["WanTransformer3DModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])


def test_wan_ti2v_per_token_timesteps(tmp_path):
    """Wan 2.2 TI2V: ``"expand_timesteps": true`` in config.json (what a pipeline build
    writes) makes ``timestep`` [batch, video_tokens]; the conditioning frame's tokens at 0."""
    import onnxruntime as ort
    import torch

    model = make_random_diffusers_model("WanTransformer3DModel", CASES["t2v"][0])
    source = tmp_path / "hf"
    model.save_pretrained(source)
    fields = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**fields, "expand_timesteps": True}))
    rng = np.random.default_rng(0)
    frames, patches_per_frame = 3, 2 * 3  # a 4 x 6 latent in 2 x 2 patches
    timestep = np.repeat([[10.0], [700.0]], frames * patches_per_frame, axis=1)
    timestep[:, :patches_per_frame] = 0.0  # the first latent frame is the given image
    feed = {
        "hidden_states": rng.standard_normal((2, 4, frames, 4, 6)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "timestep": timestep.astype(np.float32),
    }
    with torch.no_grad():
        torch_feed = {k: torch.from_numpy(v) for k, v in feed.items()}
        expected = DIFFUSERS_CALLS["WanTransformer3DModel"](model, "model", torch_feed)
    for ep in ("default", "cpu"):
        out = build_with_cli(source, tmp_path / f"onnx-{ep}", "--ep", ep)
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        result = DiffusionParity(ep, compare_graph(session, feed, expected))
        result.assert_close()
        print(ep, result.diffs)


def test_wan_hub_layout_validates(tmp_path):
    """The hub's layout (shards and their index; I2V's unused ``norm_added_q``) of a
    first-last-frame model builds and passes ``--validate`` (samples.py's feeds,
    diffusers' own reading of the directory)."""
    source, out = tmp_path / "transformer", tmp_path / "out"
    model = make_random_diffusers_model("WanTransformer3DModel", CASES["flf2v"][0])
    model.save_pretrained(source, max_shard_size="60KB")
    index_path = source / "diffusion_pytorch_model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    assert len(set(index["weight_map"].values())) > 1, "the checkpoint was not sharded"
    unused = {"blocks.0.attn2.norm_added_q.weight": np.ones(24, np.float32)}
    save_file(unused, source / "diffusion_pytorch_model-unused.safetensors")
    index["weight_map"].update(dict.fromkeys(unused, "diffusion_pytorch_model-unused.safetensors"))
    index_path.write_text(json.dumps(index))
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True and validation["diffs"], validation
    print(validation["diffs"])


#: transformer/config.json of Wan-AI/Wan2.1-T2V-1.3B-Diffusers, as the hub holds it.
HUB_T2V_1_3B = {
    "_class_name": "WanTransformer3DModel",
    "_diffusers_version": "0.33.0.dev0",
    "added_kv_proj_dim": None,
    "attention_head_dim": 128,
    "cross_attn_norm": True,
    "eps": 1e-06,
    "ffn_dim": 8960,
    "freq_dim": 256,
    "image_dim": None,
    "in_channels": 16,
    "num_attention_heads": 12,
    "num_layers": 30,
    "out_channels": 16,
    "patch_size": [1, 2, 2],
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
    "text_dim": 4096,
}


def test_wan_reads_the_hub_config():
    from mobius_diffusion.config import ComponentConfig

    config = WanConfig.from_hf(ComponentConfig(HUB_T2V_1_3B))
    assert (config.inner_dim, config.patch_size, config.image_dim) == (1536, (1, 2, 2), None)


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(pos_embed_seq_len=514), "pos_embed_seq_len"),
        (dict(image_dim=20, added_kv_proj_dim=24, pos_embed_seq_len=5), "pos_embed_seq_len"),
        (dict(image_dim=20), "added_kv_proj_dim"),
        (dict(image_dim=20, added_kv_proj_dim=8), "added_kv_proj_dim"),
        (dict(patch_size=[1, 2]), "patch_size"),
        (dict(num_layers="2"), "num_layers"),
        (dict(attention_head_dim=11), "attention_head_dim"),
        (dict(expand_timesteps="yes"), "expand_timesteps"),
    ],
)
def test_wan_refuses_what_it_does_not_build(change, named):
    with pytest.raises(ConfigError, match=named):
        WanConfig.from_hf(_Fields(**dict(BASE, **change)))
