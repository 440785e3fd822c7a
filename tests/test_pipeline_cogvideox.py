"""A tiny random CogVideoX 1.5 text-to-video pipeline: built whole with ``mobius build``, run by
mobius's numpy runner and by diffusers from the same latents, 2 steps with CFG of the hub's
CogVideoXDPMScheduler (the same noise drawn by both) and 2 of CogVideoXDDIMScheduler with
dynamic CFG; the frames agree to 1e-3 on [0, 1] (measured 2.2e-6 and 2.5e-6).

Every parameter is perturbed. The pipeline is laid out as the hub holds
THUDM/CogVideoX1.5-5B (a ``T5EncoderModel``, a T5-style tokenizer,
``CogVideoXTransformer3DModel`` with ``patch_size_t`` 2 and rotary embeddings,
``AutoencoderKLCogVideoX``, its CogVideoXDPMScheduler config; the DDIM run takes
THUDM/CogVideoX-2b's, both v-prediction, zero terminal SNR, trailing): 9 frames make 3 latent frames, padded in
front to 4 for the frame patches. CogVideoX 1.0's rotary tables (the linspace grid) are
checked against diffusers' own function here too.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from pipeline_cases import PROMPT, _perturbed, tiny_t5, tiny_word_tokenizer

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 9, 16, 24  # latents [1, 3 + 1 padding, 4, 4, 6]: 2 x 3 patches a frame
LATENTS = (1, 4, 4, 4, 6)
MAX_SEQUENCE_LENGTH = 10  # the prompt's tokens and pads (unmasked, as diffusers)
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)

#: scheduler/scheduler_config.json of THUDM/CogVideoX-2b (CogVideoXDDIMScheduler) and of
#: THUDM/CogVideoX1.5-5B (CogVideoXDPMScheduler): their fields that differ from the defaults.
HUB_SCHEDULER = dict(
    clip_sample=False,
    prediction_type="v_prediction",
    rescale_betas_zero_snr=True,
    timestep_spacing="trailing",
)


def make_cogvideox_pipeline(directory: Path):
    """A tiny ``CogVideoXPipeline`` (T5 16 wide, a 1-layer 1.5 transformer, a VAE of 4
    latent channels that divides time by 4 and space by 4) saved into ``directory``."""
    import torch
    from diffusers import (
        AutoencoderKLCogVideoX,
        CogVideoXDPMScheduler,
        CogVideoXPipeline,
        CogVideoXTransformer3DModel,
    )

    torch.manual_seed(0)
    tokenizer = tiny_word_tokenizer()
    text_encoder = tiny_t5(len(tokenizer), 16)
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        out_channels=4,
        time_embed_dim=16,
        text_embed_dim=16,
        num_layers=1,
        sample_width=8,
        sample_height=8,
        sample_frames=9,
        patch_size=2,
        patch_size_t=2,
        max_text_seq_length=MAX_SEQUENCE_LENGTH,
        use_rotary_positional_embeddings=True,
        patch_bias=False,
    )
    vae = AutoencoderKLCogVideoX(
        down_block_types=["CogVideoXDownBlock3D"] * 3,
        up_block_types=["CogVideoXUpBlock3D"] * 3,
        block_out_channels=[8, 16, 16],
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=4,
        temporal_compression_ratio=4,
        scaling_factor=0.7,
    )
    _perturbed(text_encoder, transformer, vae)
    pipe = CogVideoXPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=CogVideoXDPMScheduler(**HUB_SCHEDULER),
    )
    pipe.save_pretrained(directory)
    return pipe


@pytest.fixture(scope="module")
def cogvideox(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("cogvideox")
    pipe = make_cogvideox_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_cogvideox_builds_whole_and_matches_diffusers(cogvideox):
    import torch
    from diffusers import CogVideoXDDIMScheduler

    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline
    from mobius_diffusion.pipelines.cogvideox import CogVideoXRunner

    pipe, out = cogvideox
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "T5EncoderModel"
    assert built["transformer/model"] == "CogVideoXTransformer3DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, CogVideoXRunner)

    latents = np.random.default_rng(1).standard_normal(LATENTS).astype(np.float32)
    options = dict(
        OPTIONS, negative_prompt="a blue bicycle", max_sequence_length=MAX_SEQUENCE_LENGTH
    )
    for sampler in ("dpm", "ddim with dynamic cfg"):
        dynamic = sampler != "dpm"
        if dynamic:  # both pipelines switch to CogVideoX-2b's sampler
            runner.scheduler_config = {"_class_name": "CogVideoXDDIMScheduler", **HUB_SCHEDULER}
            pipe.scheduler = CogVideoXDDIMScheduler(**HUB_SCHEDULER)
        with torch.no_grad(), same_step_noise(seed=5):
            expected = pipe(
                PROMPT,
                latents=torch.from_numpy(latents),
                output_type="np",
                use_dynamic_cfg=dynamic,
                **options,
            ).frames
        got = runner(PROMPT, latents=latents, seed=5, use_dynamic_cfg=dynamic, **options)
        assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
        assert float(expected.std()) > 1e-3, "the video barely depends on anything"
        diff = float(np.abs(got - expected).max())
        print("cogvideox", sampler, "max abs diff", diff)
        assert diff <= 1e-3

    with pytest.raises(ConfigError, match=r"latents of shape \(1, 3, 4, 4, 6\) given; this needs"):
        runner(PROMPT, latents=latents[:, 1:], **options)  # 1.5's padding frame left out


@contextmanager
def same_step_noise(seed: int):
    """diffusers' DPM sampler draws its step noise as mobius's runner does for ``seed``
    (numpy's generator on the stream ``[seed, 1]``), so both add the same numbers."""
    import torch
    from diffusers.schedulers import scheduling_dpm_cogvideox

    rng = np.random.default_rng([seed, 1])

    def numpy_randn(shape, **_):
        return torch.from_numpy(rng.standard_normal(tuple(shape), dtype=np.float32))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scheduling_dpm_cogvideox, "randn_tensor", numpy_randn)
        yield


def _config_copy(out: Path, package: Path, path: str, update: dict) -> Path:
    """``package``: the built package's configs (no graphs), ``path``'s JSON updated."""
    import shutil

    package.mkdir()
    (package / "model_index.json").write_text((out / "model_index.json").read_text())
    for part in ("scheduler", "transformer", "vae"):
        shutil.copytree(out / part, package / part, ignore=shutil.ignore_patterns("*.onnx*"))
    config = json.loads((package / path).read_text())
    (package / path).write_text(json.dumps({**config, **update}))
    return package


@pytest.mark.parametrize("version", ["1.0", "1.5"])
def test_runner_rotary_tables_are_the_pipelines(cogvideox, tmp_path, version):
    """The runner's tables for a 1.0 (no ``patch_size_t``) and a 1.5 transformer, against the
    diffusers pipeline's ``_prepare_rotary_positional_embeddings`` on the same configs."""
    from types import SimpleNamespace

    from diffusers import CogVideoXPipeline

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = cogvideox
    update = {"patch_size_t": None} if version == "1.0" else {}
    runner = open_pipeline(_config_copy(out, tmp_path / "p", "transformer/config.json", update))
    config = SimpleNamespace(**{**dict(pipe.transformer.config), **update})
    fake = SimpleNamespace(vae_scale_factor_spatial=4, transformer=SimpleNamespace(config=config))
    frames = 3 if version == "1.0" else 4
    cos, sin = CogVideoXPipeline._prepare_rotary_positional_embeddings(
        fake, HEIGHT, WIDTH, frames, "cpu"
    )
    tables = runner.rotary_tables(frames, (HEIGHT // 8, WIDTH // 8))
    np.testing.assert_allclose(tables["image_rotary_cos"], cos.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(tables["image_rotary_sin"], sin.numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("frames, size", [(13, (6, 10)), (9, (2, 3))])
def test_rotary_tables_match_diffusers(frames, size):
    from diffusers.models.embeddings import get_3d_rotary_pos_embed
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

    from mobius_diffusion.pipelines.cogvideox import resize_crop_region, rotary_3d

    base_h, base_w = 8, 12
    crops = get_resize_crop_region_for_grid(size, base_w, base_h)
    assert resize_crop_region(size, base_w, base_h) == crops
    for ours, theirs in (
        (
            rotary_3d(32, size, frames, crops=crops),
            get_3d_rotary_pos_embed(32, crops, size, frames),
        ),
        (
            rotary_3d(32, size, frames, max_size=(base_h, base_w)),
            get_3d_rotary_pos_embed(
                32, None, size, frames, grid_type="slice", max_size=(base_h, base_w)
            ),
        ),
    ):
        for table, reference in zip(ours, theirs, strict=True):
            assert table.shape == tuple(reference.shape)
            np.testing.assert_allclose(table, reference.numpy(), rtol=0, atol=1e-6)


def test_generate_cli_writes_the_video(cogvideox, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main

    _, out = cogvideox
    clip = tmp_path / "clip.webp"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main([*args, "--fps", "8", "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
    capsys.readouterr()

    for extra, message in (
        (["--frames", "8"], "a CogVideoX video has 4k+1 frames (1, 5, 9...), not 8"),
        (["--width", "20"], "a CogVideoX video's height and width are multiples of 8, not 16 x 20"),
    ):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ("scheduler/scheduler_config.json", {"_class_name": "LMSDiscreteScheduler"}),
            "scheduler 'LMSDiscreteScheduler' is not ported",
        ),
        (
            ("transformer/config.json", {"ofs_embed_dim": 512}),
            "this one takes ofs (ofs_embed_dim: image to video)",
        ),
    ],
)
def test_unrun_variants_are_refused(cogvideox, tmp_path, change, message):
    """An unported sampler and an image-to-video transformer: one-line refusals."""
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    _, out = cogvideox
    with pytest.raises(ConfigError) as error:
        open_pipeline(_config_copy(out, tmp_path / "package", *change))
    assert message in str(error.value) and "\n" not in str(error.value)
