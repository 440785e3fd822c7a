"""UNet2DConditionModel with IP-Adapter attention (``--ip-adapter FILE``) against diffusers.

The adapter file is written in the original layout (``image_proj.*`` and
``ip_adapter.{2k+1}.to_k_ip/to_v_ip.weight``, every tensor random); the reference is
the perturbed diffusers UNet after ``_load_ip_adapter_weights`` of that file (its
image projection made the identity: the graph takes the projected tokens) and
``set_ip_adapter_scale``'s scale. The ``-faceid-lora`` case adds FaceID's LoRA of every
attention, which the build merges and diffusers applies through peft.
"""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from mobius.cli import main
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CROSS, IMAGE_EMBED, TOKENS = 12, 10, 4
SD15 = dict(
    in_channels=4,
    out_channels=4,
    down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
    up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
    block_out_channels=[8, 16],
    layers_per_block=1,
    cross_attention_dim=CROSS,
    attention_head_dim=2,
    norm_num_groups=4,
)
CASES = {
    "sd15": SD15,
    # SDXL's layout: linear projections, two transformer blocks per layer, the added embedding
    "sdxl": dict(
        SD15,
        down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
        up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
        transformer_layers_per_block=[1, 2],
        attention_head_dim=[1, 2],
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=10 + 6 * 4,
    ),
}


def cross_attention_widths(config: dict) -> list[int]:
    """The width of each cross-attention of the diffusers UNet, in its processor order."""
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_config(config)
    return [m.to_q.out_features for n, m in unet.named_modules() if n.endswith("attn2")]


def adapter_tensors(config: dict, seed: int = 3, lora: bool = False) -> dict[str, np.ndarray]:
    """A plain IP-Adapter checkpoint for the UNet of ``config``: every tensor random; with
    ``lora``, FaceID's LoRA (rank 2) of every attention, the self-attentions' at even ids."""
    rng = np.random.default_rng(seed)
    shapes = {
        "image_proj.proj.weight": (TOKENS * CROSS, IMAGE_EMBED),
        "image_proj.proj.bias": (TOKENS * CROSS,),
        "image_proj.norm.weight": (CROSS,),
        "image_proj.norm.bias": (CROSS,),
    }
    for k, width in enumerate(cross_attention_widths(config)):
        for name in ("to_k_ip", "to_v_ip"):
            shapes[f"ip_adapter.{2 * k + 1}.{name}.weight"] = (width, CROSS)
        for key_id, inputs in ((2 * k, width), (2 * k + 1, CROSS)) if lora else ():
            for proj in ("to_q", "to_k", "to_v", "to_out"):
                fan_in = inputs if proj in ("to_k", "to_v") else width
                shapes[f"ip_adapter.{key_id}.{proj}_lora.down.weight"] = (2, fan_in)
                shapes[f"ip_adapter.{key_id}.{proj}_lora.up.weight"] = (width, 2)
    return {n: (0.3 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}


def ip_reference(tensors: dict[str, np.ndarray]):
    """The UNet reference, run on the diffusers UNet with the adapter loaded (once)."""
    import torch

    from mobius_diffusion.testing._references import load_ip_adapter_attention

    def reference(model, graph, inputs):
        if not getattr(model, "_ip_adapter_loaded", False):
            load_ip_adapter_attention(model, {k: torch.from_numpy(v) for k, v in tensors.items()})
            model._ip_adapter_loaded = True
        return DIFFUSERS_CALLS["UNet2DConditionModel"](model, graph, inputs)

    return reference


def unet_inputs(case: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inputs = {
        "sample": rng.standard_normal((2, 4, 8, 8)).astype(np.float32),
        "timestep": np.array([3.5, 801.0], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 7, CROSS)).astype(np.float32),
        "ip_adapter_image_embeds": rng.standard_normal((2, TOKENS, CROSS)).astype(np.float32),
        "ip_adapter_scale": np.array(0.7, np.float32),
    }
    if case == "sdxl":
        inputs["text_embeds"] = rng.standard_normal((2, 10)).astype(np.float32)
        inputs["time_ids"] = np.array([[64, 48, 0, 8, 64, 64], [32, 32, 4, 0, 32, 32]], np.float32)
    return inputs


@pytest.mark.parametrize("case", [*sorted(CASES), "sdxl-faceid-lora"])
def test_ip_adapter_unet_parity(case, tmp_path):
    lora = case.endswith("-faceid-lora")  # its LoRA merged, against diffusers' through peft
    case = case.removesuffix("-faceid-lora")
    tensors = adapter_tensors(CASES[case], lora=lora)
    adapter = tmp_path / "ip-adapter.safetensors"
    save_file(tensors, adapter)
    results = check_diffusion_parity(
        "UNet2DConditionModel",
        CASES[case],
        {"model": unet_inputs(case)},
        ip_reference(tensors),
        tmp_path,
        build_args=("--ip-adapter", str(adapter)),
    )
    for result in results:
        print(case, result.ep, result.diffs)


def _build(tmp_path, tensors: dict[str, np.ndarray], *extra: str) -> int:
    from mobius_diffusion.testing import make_random_diffusers_model

    make_random_diffusers_model("UNet2DConditionModel", SD15).save_pretrained(tmp_path / "hf")
    save_file(tensors, tmp_path / "ip.safetensors")
    args = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "onnx"), "--quiet"]
    return main([*args, "--ip-adapter", str(tmp_path / "ip.safetensors"), *extra])


def test_unread_adapter_tensors_fail_the_build(tmp_path, capsys):
    """A tensor of the adapter file the UNet does not read (an id past its cross-attentions)
    fails the build, named."""
    tensors = adapter_tensors(SD15)
    tensors["ip_adapter.9.to_k_ip.weight"] = tensors["ip_adapter.1.to_k_ip.weight"]
    assert _build(tmp_path, tensors) == 1
    assert "ip_adapter.9.to_k_ip.weight" in capsys.readouterr().err


def test_missing_adapter_tensors_fail_the_build(tmp_path, capsys):
    tensors = adapter_tensors(SD15)
    del tensors["ip_adapter.3.to_v_ip.weight"]
    assert _build(tmp_path, tensors) == 1
    assert "to_v_ip.weight" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        (
            {"ip_adapter.1.to_k_lora.down.weight": (2, CROSS)},
            "to_k_lora.down.weight has no up half",
        ),
        (
            {
                "ip_adapter.0.to_q_lora.down.weight": (2, 8),
                "ip_adapter.0.to_q_lora.up.weight": (4, 2),
            },
            "do not fit down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight [8, 8]",
        ),
    ],
)
def test_a_faceid_lora_that_does_not_fit_fails_the_build(tmp_path, capsys, lora, message):
    """FaceID's LoRA is merged into the UNet (its parity: tests/test_pipeline_ip_adapter_plus.py);
    half a pair, or a pair whose product is not the weight's shape, is refused by name."""
    tensors = adapter_tensors(SD15)
    tensors |= {name: np.ones(shape, np.float32) for name, shape in lora.items()}
    assert _build(tmp_path, tensors) == 1
    assert message in capsys.readouterr().err
