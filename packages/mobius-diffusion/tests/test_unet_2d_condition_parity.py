"""UNet2DConditionModel parity: SD 1.x, SD 2.x and SDXL layouts (and the other options built) against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

SD15 = dict(
    in_channels=4,
    out_channels=4,
    down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    block_out_channels=[8, 16, 16],
    layers_per_block=2,
    cross_attention_dim=12,
    attention_head_dim=2,  # diffusers' name for the head count
    norm_num_groups=4,
)
CASES = {
    "sd15": SD15,
    # SD 2.x: linear projections, heads per block, an odd latent size (upsample to the skips' size).
    "sd2": dict(
        SD15, use_linear_projection=True, attention_head_dim=[1, 2, 4], upcast_attention=True
    ),
    "sdxl": dict(
        SD15,
        down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
        up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
        block_out_channels=[8, 16, 24],
        attention_head_dim=[1, 2, 3],
        transformer_layers_per_block=[1, 2, 2],
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=10 + 6 * 4,
    ),
    "options": dict(
        SD15,
        layers_per_block=[1, 2, 1],
        resnet_time_scale_shift="scale_shift",
        time_embedding_act_fn="silu",
        time_embedding_dim=24,
        center_input_sample=True,
        conv_in_kernel=1,
        downsample_padding=0,
        mid_block_type=None,
        transformer_layers_per_block=[[1, 2], [2, 1], 1],
        reverse_transformer_layers_per_block=[[1, 1], [2, 1, 1], [1, 2]],
        flip_sin_to_cos=False,
        freq_shift=1,
    ),
    "mid-scale": dict(SD15, mid_block_scale_factor=2.0, layers_per_block=1),
    # Latent consistency models: the guidance-scale embedding through time_embedding.cond_proj.
    "lcm": dict(SD15, time_cond_proj_dim=6),
    # Kandinsky 2.2 (unet/config.json as the hub holds it, scaled down): the image embedding as
    # the context's 32 tokens and added to the time embedding; the simple blocks (keys and values
    # of the context and the pixels; resnets that down/upsample); attention_head_dim a head width
    "kandinsky22": dict(
        in_channels=4,
        out_channels=8,
        down_block_types=[
            "ResnetDownsampleBlock2D",
            "SimpleCrossAttnDownBlock2D",
            "SimpleCrossAttnDownBlock2D",
        ],
        up_block_types=[
            "SimpleCrossAttnUpBlock2D",
            "SimpleCrossAttnUpBlock2D",
            "ResnetUpsampleBlock2D",
        ],
        mid_block_type="UNetMidBlock2DSimpleCrossAttn",
        block_out_channels=[8, 16, 16],
        layers_per_block=2,
        encoder_hid_dim=10,
        encoder_hid_dim_type="image_proj",
        addition_embed_type="image",
        cross_attention_dim=12,
        attention_head_dim=4,
        resnet_time_scale_shift="scale_shift",
        norm_num_groups=4,
    ),
}
# The simple blocks' GroupNorm of the context (diffusers' 32 groups), a mid-block scale
CASES["kandinsky-cross-norm"] = dict(
    CASES["kandinsky22"],
    block_out_channels=[8, 16],
    down_block_types=["SimpleCrossAttnDownBlock2D", "ResnetDownsampleBlock2D"],
    up_block_types=["ResnetUpsampleBlock2D", "SimpleCrossAttnUpBlock2D"],
    layers_per_block=1,
    cross_attention_dim=32,
    cross_attention_norm="group_norm",
    mid_block_scale_factor=2.0,
)
LATENT = {"sd2": (9, 11), "options": (12, 10)}


unet_reference = DIFFUSERS_CALLS["UNet2DConditionModel"]


def unet_inputs(case: str, timestep: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    h, w = LATENT.get(case, (8, 8))
    inputs = {
        "sample": rng.standard_normal((2, 4, h, w)).astype(np.float32),
        "timestep": timestep,
        "encoder_hidden_states": rng.standard_normal((2, 7, 12)).astype(np.float32),
    }
    if case.startswith("kandinsky"):  # the image embedding in place of the text
        del inputs["encoder_hidden_states"]
        inputs["image_embeds"] = rng.standard_normal((2, 10)).astype(np.float32)
    if case == "sdxl":
        inputs["text_embeds"] = rng.standard_normal((2, 10)).astype(np.float32)
        inputs["time_ids"] = np.array([[64, 48, 0, 8, 64, 64], [32, 32, 4, 0, 32, 32]], np.float32)
    if case == "lcm":
        inputs["timestep_cond"] = lcm_guidance_embedding(
            [8.0, 2.0], CASES["lcm"]["time_cond_proj_dim"]
        )
    return inputs


def lcm_guidance_embedding(guidance_scales, dim: int) -> np.ndarray:
    """``timestep_cond`` as LatentConsistencyModelPipeline computes it (``guidance_scale - 1``)."""
    import torch
    from diffusers import LatentConsistencyModelPipeline

    w = torch.tensor(guidance_scales, dtype=torch.float32) - 1
    embed = LatentConsistencyModelPipeline.get_guidance_scale_embedding
    return embed(None, w, embedding_dim=dim).numpy()  # it reads nothing of the pipeline


@pytest.mark.parametrize("dim", [6, 7, 256])
def test_lcm_sample_embedding_is_the_pipelines(dim):
    """--validate's numpy ``timestep_cond`` is the LCM pipeline's guidance-scale embedding."""
    from mobius_diffusion.samples import guidance_scale_embedding

    expected = lcm_guidance_embedding([8.0, 2.0], dim)
    # Angles reach 7000 (1000 x (8 - 1)); torch's float32 exp is not correctly rounded, and a
    # frequency one ulp off moves such an angle by its float32 resolution, ~5e-4.
    resolution = float(np.spacing(np.float32(7000)))
    got = guidance_scale_embedding(np.float32([7.0, 1.0]), dim)
    np.testing.assert_allclose(got, expected, atol=2 * resolution)


@pytest.mark.parametrize("case", sorted(CASES))
def test_unet_2d_condition_parity(case, tmp_path):
    inputs = unet_inputs(case, np.array([3.5, 801.0], np.float32))
    results = check_diffusion_parity(
        "UNet2DConditionModel", CASES[case], {"model": inputs}, unet_reference, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "lcm":  # --validate feeds the pipeline's guidance-scale embedding, and passes
        from mobius.validate import validate_package

        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


def test_unet_one_timestep_for_the_batch(tmp_path):
    """A pipeline's single timestep (shape [1]) is broadcast to the batch, as diffusers does."""
    inputs = unet_inputs("sd15", np.array([421.0], np.float32))
    check_diffusion_parity(
        "UNet2DConditionModel", SD15, {"model": inputs}, unet_reference, tmp_path, eps=("default",)
    )


@pytest.mark.parametrize(
    "option",
    [
        dict(addition_embed_type="text"),
        dict(class_embed_type="timestep"),
        dict(time_cond_proj_dim=0),
        dict(time_cond_proj_dim="8"),
        dict(only_cross_attention=[True, False, False]),
        dict(resnet_time_scale_shift="spatial"),
        dict(mid_block_type="UNetMidBlock2D"),
        dict(down_block_types=["AttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"]),
        dict(encoder_hid_dim=10),  # diffusers' text_proj
        dict(encoder_hid_dim=10, encoder_hid_dim_type="text_image_proj"),
        dict(encoder_hid_dim_type="image_proj"),  # no encoder_hid_dim
        dict(addition_embed_type="image", encoder_hid_dim=10),  # no image_proj
        dict(cross_attention_norm="layer_norm"),
        dict(cross_attention_norm="group_norm"),  # 12 text channels: not 32 groups
        dict(resnet_skip_time_act=True),
        dict(resnet_out_scale_factor=2.0),
        dict(mid_block_only_cross_attention=True),
        dict(act_fn="mish"),
    ],
)
def test_unet_refuses_what_it_does_not_build(option):
    from mobius.errors import ConfigError
    from mobius_diffusion.config import ComponentConfig
    from mobius_diffusion.models.unet_2d_condition import UNet2DConditionModel

    fields = {"_class_name": "UNet2DConditionModel", **SD15, **option}
    with pytest.raises(ConfigError):
        UNet2DConditionModel(UNet2DConditionModel.config_class.from_hf(ComponentConfig(fields)))


#: Residual shapes of the 8x8 latent, batch 2: (channels, size) per input.
RESIDUALS = {
    # SD 1.5 layout + ControlNet: every skip (conv_in, 2 layers + downsample per block), the mid.
    ("sd15", "controlnet"): [(8, 8)] * 3
    + [(8, 4), (16, 4), (16, 4), (16, 2), (16, 2), (16, 2)]
    + [(16, 2)],
    # (SD 1.5 layout + adapter, a zero placeholder for the mid: tests/test_pipeline_controlnet.py.)
    # SDXL layout + XL adapter: the plain first block adds after its downsampler; the mid gets one.
    ("sdxl", "adapter"): [(8, 4), (16, 4), (24, 2), (24, 2)],
}


@pytest.mark.parametrize(("case", "kind"), sorted(RESIDUALS))
def test_unet_residual_inputs_parity(case, kind, tmp_path):
    """``--unet-residuals``: a ControlNet's residuals / a T2I-Adapter's features, as diffusers adds them."""
    inputs = unet_inputs(case, np.array([3.5, 801.0], np.float32))
    rng = np.random.default_rng(1)
    prefix = (
        "down_block_additional_residuals"
        if kind == "controlnet"
        else "down_intrablock_additional_residuals"
    )
    shapes = RESIDUALS[(case, kind)]
    for i, (channels, size) in enumerate(shapes):
        name = f"{prefix}.{i}"
        if kind == "controlnet" and i == len(shapes) - 1:
            name = "mid_block_additional_residual"
        value = rng.standard_normal((2, channels, size, size)).astype(np.float32)
        inputs[name] = np.zeros_like(value) if size == 1 else value
    check_diffusion_parity(
        "UNet2DConditionModel",
        CASES[case],
        {"model": inputs},
        unet_reference,
        tmp_path,
        eps=("default",),
        build_args=("--unet-residuals", kind),
    )
    from mobius.validate import validate_package  # --validate feeds the residuals too, and passes

    report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
    assert report.reference and report.diffs and report.passed, report.summary()


def test_unet_residuals_option_is_for_unets():
    """``--unet-residuals`` on another denoiser is one line naming the option."""
    from mobius.errors import ConfigError
    from mobius_diffusion.tasks import DenoisingTask

    class Options:
        head, pooling, normalize = "auto", None, None
        plugin = {"unet_residuals": "controlnet"}

    class Source:
        class entry:
            key = "SD3Transformer2DModel"

    with pytest.raises(ConfigError, match="--unet-residuals applies to UNet2DConditionModel"):
        DenoisingTask().configure(object(), Options(), Source())
    Options.plugin = {"unet_residuals": "lora"}
    with pytest.raises(ConfigError, match="expected one of controlnet, adapter"):
        DenoisingTask().configure(object(), Options(), Source())
