"""Write SUPPORT.md: the diffusers component classes mobius-diffusion targets, and their status.

The status comes from the registry (what mobius-diffusion registers) and from a
fresh run of the parity tests: a class is *verified* only when it is registered
and every parity case of it passes. The verified classes also go into
``src/mobius_diffusion/verified.json``, which the registry reads.

    uv run python packages/mobius-diffusion/scripts/support_table.py [--no-run RESULTS.xml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mobius.testing._support import add_test, parity_results, support_markdown, write_verified

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TESTS = PACKAGE_DIR / "tests"
ROOT_TESTS = PACKAGE_DIR.parents[1] / "tests"  # the whole-pipeline tests (they need mobius-text)
OUTPUT = PACKAGE_DIR / "SUPPORT.md"
VERIFIED = PACKAGE_DIR / "src" / "mobius_diffusion" / "verified.json"

#: (task, heading, what the parity covers, {class: (test file, test function)})
KITS = (
    (
        "vae",
        "Autoencoders",
        "fp32, encoder moments and decoded sample, a batch of two, max abs difference "
        "≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "AutoencoderKL": ("test_autoencoder_kl_parity.py", "test_autoencoder_kl_parity"),
            "AutoencoderKLCogVideoX": ("test_cogvideox_vae_parity.py", "test_cogvideox_vae_parity"),
            # issue 27's targets
            "AutoencoderDC": ("test_autoencoder_dc_parity.py", "test_autoencoder_dc_parity"),
            "AutoencoderTiny": (
                "test_autoencoder_tiny_parity.py",
                "test_autoencoder_tiny_parity",
            ),
            "AutoencoderKLWan": (
                "test_autoencoder_kl_wan_parity.py",
                "test_autoencoder_kl_wan_parity",
            ),
            "AutoencoderKLQwenImage": (
                "test_qwen_image_vae_parity.py",
                "test_qwen_image_vae_parity",
            ),
            "AutoencoderKLLTXVideo": ("test_ltx_vae_parity.py", "test_ltx_vae_parity"),
            "AutoencoderKLHunyuanVideo": (
                "test_hunyuan_video_vae_parity.py",
                "test_hunyuan_video_vae_parity",
            ),
            "AutoencoderKLTemporalDecoder": ("test_svd_vae_parity.py", "test_svd_vae_parity"),
            "AutoencoderKLMochi": ("test_mochi_vae_parity.py", "test_mochi_vae_parity"),
            "AutoencoderKLFlux2": ("test_flux2_vae_parity.py", "test_flux2_vae_parity"),
            "VQModel": ("test_vq_model_parity.py", "test_vq_model_parity"),
            "PaellaVQModel": ("test_paella_vq_parity.py", "test_paella_vq_parity"),
        },
    ),
    (
        "denoising",
        "Denoisers",
        "fp32, the denoiser's output for a batch of two latents, timesteps and conditionings, "
        "max abs difference ≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "UNet2DConditionModel": (
                "test_unet_2d_condition_parity.py",
                "test_unet_2d_condition_parity",
            ),
            "UNet2DModel": ("test_unet_2d_parity.py", "test_unet_2d_parity"),
            "DiTTransformer2DModel": ("test_dit_parity.py", "test_dit_parity"),
            "PixArtTransformer2DModel": ("test_pixart_parity.py", "test_pixart_parity"),
            "SD3Transformer2DModel": ("test_sd3_parity.py", "test_sd3_parity"),
            "FluxTransformer2DModel": ("test_flux_parity.py", "test_flux_parity"),
            "CogVideoXTransformer3DModel": ("test_cogvideox_parity.py", "test_cogvideox_parity"),
            # issue 27's targets
            "SanaTransformer2DModel": ("test_sana_parity.py", "test_sana_parity"),
            "WanTransformer3DModel": ("test_wan_parity.py", "test_wan_parity"),
            "WanVACETransformer3DModel": ("test_wan_vace_parity.py", "test_wan_vace_parity"),
            "SkyReelsV2Transformer3DModel": (
                "test_skyreels_v2_parity.py",
                "test_skyreels_v2_parity",
            ),
            "QwenImageTransformer2DModel": ("test_qwen_image_parity.py", "test_qwen_image_parity"),
            "LTXVideoTransformer3DModel": ("test_ltx_parity.py", "test_ltx_parity"),
            "HunyuanVideoTransformer3DModel": (
                "test_hunyuan_video_parity.py",
                "test_hunyuan_video_parity",
            ),
            "Lumina2Transformer2DModel": ("test_lumina2_parity.py", "test_lumina2_parity"),
            "MochiTransformer3DModel": ("test_mochi_parity.py", "test_mochi_parity"),
            "ZImageTransformer2DModel": ("test_z_image_parity.py", "test_z_image_parity"),
            "AuraFlowTransformer2DModel": ("test_auraflow_parity.py", "test_auraflow_parity"),
            "CogView4Transformer2DModel": ("test_cogview4_parity.py", "test_cogview4_parity"),
            "CogView3PlusTransformer2DModel": (
                "test_cogview3plus_parity.py",
                "test_cogview3plus_parity",
            ),
            "HunyuanDiT2DModel": ("test_hunyuan_dit_parity.py", "test_hunyuan_dit_parity"),
            "HiDreamImageTransformer2DModel": ("test_hidream_parity.py", "test_hidream_parity"),
            "ChromaTransformer2DModel": ("test_chroma_parity.py", "test_chroma_parity"),
            "Flux2Transformer2DModel": ("test_flux2_parity.py", "test_flux2_parity"),
            "StableCascadeUNet": ("test_stable_cascade_parity.py", "test_stable_cascade_parity"),
            "Kandinsky3UNet": ("test_kandinsky3_parity.py", "test_kandinsky3_parity"),
            "UNetMotionModel": ("test_animatediff_parity.py", "test_animatediff_parity"),
            "UNetSpatioTemporalConditionModel": ("test_svd_parity.py", "test_svd_parity"),
            "PriorTransformer": (
                "test_prior_transformer_parity.py",
                "test_prior_transformer_parity",
            ),
        },
    ),
    (
        "controlnet",
        "ControlNets",
        "fp32, every down-block and mid-block residual (UNet) or block sample (transformers), "
        "a batch of two, max abs difference ≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "ControlNetModel": ("test_controlnet_parity.py", "test_controlnet_parity"),
            "SD3ControlNetModel": ("test_controlnet_sd3_parity.py", "test_controlnet_sd3_parity"),
            "FluxControlNetModel": (
                "test_controlnet_flux_parity.py",
                "test_controlnet_flux_parity",
            ),
            "QwenImageControlNetModel": (
                "test_controlnet_qwen_image_parity.py",
                "test_controlnet_qwen_image_parity",
            ),
            "SanaControlNetModel": (
                "test_controlnet_sana_parity.py",
                "test_controlnet_sana_parity",
            ),
        },
    ),
    (
        "adapter",
        "Adapters",
        "fp32, every feature (T2I) or the image prompt embeddings (IP), a batch of two, max abs "
        "difference ≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "T2IAdapter": ("test_t2i_adapter_parity.py", "test_t2i_adapter_parity"),
            "IPAdapterImageProjection": ("test_ip_adapter_parity.py", "test_ip_adapter_parity"),
        },
    ),
)


#: diffusers pipelines: (pipeline class, what it makes, the test that builds it whole from a
#: tiny random pipeline directory, the test that runs it end to end against diffusers).
#: A test is ``FILE::FUNCTION`` under the package's tests/ or, for ``/FILE``, the repo's
#: tests/; None: no such test yet. A column reads "yes" only when every case of its test
#: passes.
PIPELINES = (
    ("StableDiffusionPipeline", "text to image",
     "/test_pipeline_sd.py::test_package_layout",
     "/test_pipeline_sd.py::test_sd_image_matches_diffusers"),
    ("StableDiffusionXLPipeline", "text to image",
     "/test_pipeline_sdxl.py::test_package_layout",
     "/test_pipeline_sdxl.py::test_sdxl_image_matches_diffusers"),
    ("FluxPipeline", "text to image",
     "/test_pipeline_flux.py::test_flux_image_matches_diffusers",
     "/test_pipeline_flux.py::test_flux_image_matches_diffusers"),
    ("StableDiffusionAdapterPipeline", "T2I-Adapter",
     "/test_pipeline_controlnet.py::test_generate_cli_writes_the_image",
     "/test_pipeline_controlnet.py::test_adapter_image_matches_diffusers"),
    ("StableDiffusion3Pipeline", "text to image",
     "/test_pipeline_sd3.py::test_generate_cli_writes_the_sd3_image",
     "/test_pipeline_sd3.py::test_sd3_image_matches_diffusers"),
    ("StableDiffusionControlNetPipeline", "ControlNet",
     "/test_pipeline_controlnet.py::test_generate_cli_writes_the_image",
     "/test_pipeline_controlnet.py::test_controlnet_image_matches_diffusers"),
    ("StableDiffusionXLControlNetPipeline", "ControlNet",
     "/test_pipeline_controlnet.py::test_sdxl_image_matches_diffusers",
     "/test_pipeline_controlnet.py::test_sdxl_image_matches_diffusers"),
    ("StableDiffusionXLAdapterPipeline", "T2I-Adapter",
     "/test_pipeline_controlnet.py::test_sdxl_image_matches_diffusers",
     "/test_pipeline_controlnet.py::test_sdxl_image_matches_diffusers"),
    ("StableDiffusionPipeline + IP-Adapter", "image prompt",
     "/test_pipeline_ip_adapter.py::test_ip_adapter_builds_whole_and_matches_diffusers",
     "/test_pipeline_ip_adapter.py::test_ip_adapter_builds_whole_and_matches_diffusers"),
    ("StableDiffusionPipeline / StableDiffusionXLPipeline + IP-Adapter Plus",
     "image prompt (resampler)",
     "/test_pipeline_ip_adapter_plus.py::test_plus_matches_diffusers",
     "/test_pipeline_ip_adapter_plus.py::test_plus_matches_diffusers"),
    ("StableDiffusionPipeline + IP-Adapter FaceID", "face embedding prompt",
     "/test_pipeline_ip_adapter_plus.py::test_faceid_matches_diffusers",
     "/test_pipeline_ip_adapter_plus.py::test_faceid_matches_diffusers"),
    ("StableDiffusionPipeline + IP-Adapter FaceID Plus (v1, v2)",
     "face embedding and image prompt",
     "/test_pipeline_ip_adapter_plus.py::test_faceid_plus_matches_diffusers",
     "/test_pipeline_ip_adapter_plus.py::test_faceid_plus_matches_diffusers"),
    ("StableDiffusionImg2ImgPipeline", "image to image",
     "/test_pipeline_img2img.py::test_package_layout",
     "/test_pipeline_img2img.py::test_img2img_matches_diffusers"),
    ("StableDiffusionInpaintPipeline", "inpainting",
     "/test_pipeline_img2img.py::test_package_layout",
     "/test_pipeline_img2img.py::test_inpainting_unet_matches_diffusers"),
    ("StableDiffusionXLImg2ImgPipeline", "image to image",
     "/test_pipeline_img2img.py::test_package_layout",
     "/test_pipeline_img2img.py::test_sdxl_img2img_matches_diffusers"),
    ("StableDiffusionXLInpaintPipeline", "inpainting",
     "/test_pipeline_img2img.py::test_package_layout",
     "/test_pipeline_img2img.py::test_sdxl_inpainting_matches_diffusers"),
    ("FluxImg2ImgPipeline", "image to image",
     "/test_pipeline_flux_image.py::test_package_layout",
     "/test_pipeline_flux_image.py::test_img2img_matches_diffusers"),
    ("FluxInpaintPipeline", "inpainting",
     "/test_pipeline_flux_image.py::test_package_layout",
     "/test_pipeline_flux_image.py::test_inpaint_matches_diffusers"),
    ("FluxKontextPipeline", "image editing",
     "/test_pipeline_flux_image.py::test_package_layout",
     "/test_pipeline_flux_image.py::test_kontext_matches_diffusers"),
    ("FluxFillPipeline", "inpainting",
     "/test_pipeline_flux_image.py::test_package_layout",
     "/test_pipeline_flux_image.py::test_fill_matches_diffusers"),
    ("CogVideoXPipeline", "text to video",
     "/test_pipeline_cogvideox.py::test_cogvideox_builds_whole_and_matches_diffusers",
     "/test_pipeline_cogvideox.py::test_cogvideox_builds_whole_and_matches_diffusers"),
    ("PixArtAlphaPipeline", "text to image",
     "/test_pipeline_pixart.py::test_alpha_legacy_transformer_builds_and_matches_diffusers",
     "/test_pipeline_pixart.py::test_alpha_legacy_transformer_builds_and_matches_diffusers"),
    ("PixArtSigmaPipeline", "text to image",
     "/test_pipeline_pixart.py::test_generate_cli_writes_the_pixart_image",
     "/test_pipeline_pixart.py::test_sigma_matches_diffusers"),
    ("DiTPipeline", "class to image",
     "/test_pipeline_dit.py::test_generate_cli_draws_the_class",
     "/test_pipeline_dit.py::test_dit_image_matches_diffusers"),
    ("DDPMPipeline", "unconditional image",
     "/test_pipeline_ddpm.py::test_package_layout",
     "/test_pipeline_ddpm.py::test_ddpm_image_matches_diffusers"),
    ("StableDiffusionPipeline + AutoencoderTiny", "text to image (TAESD)",
     "/test_pipeline_taesd.py::test_package_layout",
     "/test_pipeline_taesd.py::test_sd_with_taesd_matches_diffusers"),
    ("LatentConsistencyModelPipeline", "text to image (LCM)",
     "/test_pipeline_lcm.py::test_generate_cli_writes_the_image",
     "/test_pipeline_lcm.py::test_lcm_image_matches_diffusers"),
    ("QwenImagePipeline", "text to image",
     "/test_pipeline_qwen_image.py::test_qwen_image_builds_whole_and_matches_diffusers",
     "/test_pipeline_qwen_image.py::test_qwen_image_builds_whole_and_matches_diffusers"),
    ("QwenImageEditPipeline", "image editing",
     "/test_pipeline_qwen_image_edit.py::test_qwen_image_edit_builds_whole_and_matches_diffusers",
     "/test_pipeline_qwen_image_edit.py::test_qwen_image_edit_builds_whole_and_matches_diffusers"),
    ("WanPipeline", "text to video",
     "/test_pipeline_wan.py::test_wan_builds_whole_and_matches_diffusers",
     "/test_pipeline_wan.py::test_wan_builds_whole_and_matches_diffusers"),
    ("WanPipeline (Wan 2.2 A14B)", "text to video, two experts",
     "/test_pipeline_wan.py::test_wan22_two_experts_match_diffusers",
     "/test_pipeline_wan.py::test_wan22_two_experts_match_diffusers"),
    ("WanImageToVideoPipeline", "image to video",
     "/test_pipeline_wan_i2v.py::test_wan_i2v_builds_whole_and_matches_diffusers",
     "/test_pipeline_wan_i2v.py::test_wan_i2v_builds_whole_and_matches_diffusers"),
    ("WanImageToVideoPipeline (Wan 2.1 FLF2V)", "first and last frame to video",
     "/test_pipeline_wan_i2v.py::test_wan_i2v_builds_whole_and_matches_diffusers",
     "/test_pipeline_wan_i2v.py::test_wan_i2v_builds_whole_and_matches_diffusers"),
    ("WanPipeline (Wan 2.2 TI2V)", "text or image to video, per-token timesteps",
     "/test_pipeline_wan_ti2v.py::test_wan22_ti2v_matches_diffusers",
     "/test_pipeline_wan_ti2v.py::test_wan22_ti2v_matches_diffusers"),
    ("SkyReelsV2Pipeline", "text to video",
     "/test_pipeline_skyreels_v2.py::test_skyreels_v2_builds_whole_and_matches_diffusers",
     "/test_pipeline_skyreels_v2.py::test_skyreels_v2_builds_whole_and_matches_diffusers"),
    ("LTXPipeline", "text to video",
     "/test_pipeline_ltx.py::test_ltx_builds_whole_and_matches_diffusers",
     "/test_pipeline_ltx.py::test_ltx_builds_whole_and_matches_diffusers"),
    ("HunyuanVideoPipeline", "text to video",
     "/test_pipeline_hunyuan_video.py::test_hunyuan_video_builds_whole_and_matches_diffusers",
     "/test_pipeline_hunyuan_video.py::test_hunyuan_video_builds_whole_and_matches_diffusers"),
    ("MochiPipeline", "text to video",
     "/test_pipeline_mochi.py::test_mochi_builds_whole_and_matches_diffusers",
     "/test_pipeline_mochi.py::test_mochi_builds_whole_and_matches_diffusers"),
    ("SanaPipeline", "text to image",
     "/test_pipeline_sana.py::test_sana_builds_whole_and_matches_diffusers",
     "/test_pipeline_sana.py::test_sana_builds_whole_and_matches_diffusers"),
    ("Lumina2Pipeline", "text to image",
     "/test_pipeline_lumina2_cogview4.py::test_lumina2_builds_whole_and_matches_diffusers",
     "/test_pipeline_lumina2_cogview4.py::test_lumina2_builds_whole_and_matches_diffusers"),
    ("AuraFlowPipeline", "text to image",
     "/test_pipeline_chroma_auraflow.py::test_auraflow_builds_whole_and_matches_diffusers",
     "/test_pipeline_chroma_auraflow.py::test_auraflow_builds_whole_and_matches_diffusers"),
    ("CogView4Pipeline", "text to image",
     "/test_pipeline_lumina2_cogview4.py::test_cogview4_builds_whole_and_matches_diffusers",
     "/test_pipeline_lumina2_cogview4.py::test_cogview4_builds_whole_and_matches_diffusers"),
    ("CogView3PlusPipeline", "text to image",
     "/test_pipeline_cogview3plus.py::test_cogview3plus_builds_whole_and_matches_diffusers",
     "/test_pipeline_cogview3plus.py::test_cogview3plus_builds_whole_and_matches_diffusers"),
    ("HiDreamImagePipeline", "text to image",
     "/test_pipeline_hidream.py::test_hidream_builds_whole_and_matches_diffusers",
     "/test_pipeline_hidream.py::test_hidream_builds_whole_and_matches_diffusers"),
    ("ChromaPipeline", "text to image",
     "/test_pipeline_chroma_auraflow.py::test_chroma_builds_whole_and_matches_diffusers",
     "/test_pipeline_chroma_auraflow.py::test_chroma_builds_whole_and_matches_diffusers"),
    ("StableCascadeCombinedPipeline", "text to image",
     "/test_pipeline_stable_cascade.py::test_stable_cascade_builds_whole_and_matches_diffusers",
     "/test_pipeline_stable_cascade.py::test_stable_cascade_builds_whole_and_matches_diffusers"),
    ("KandinskyV22CombinedPipeline", "text to image",
     "/test_pipeline_kandinsky.py::test_kandinsky_builds_whole_and_matches_diffusers",
     "/test_pipeline_kandinsky.py::test_kandinsky_builds_whole_and_matches_diffusers"),
    ("Kandinsky3Pipeline", "text to image",
     "/test_pipeline_kandinsky3.py::test_kandinsky3_builds_whole_and_matches_diffusers",
     "/test_pipeline_kandinsky3.py::test_kandinsky3_builds_whole_and_matches_diffusers"),
    ("AnimateDiffPipeline", "text to video",
     "/test_pipeline_animatediff.py::test_animatediff_builds_whole_and_matches_diffusers",
     "/test_pipeline_animatediff.py::test_animatediff_builds_whole_and_matches_diffusers"),
    ("StableVideoDiffusionPipeline", "image to video",
     "/test_pipeline_svd.py::test_svd_builds_whole_and_matches_diffusers",
     "/test_pipeline_svd.py::test_svd_builds_whole_and_matches_diffusers"),
    ("Flux2Pipeline", "text to image",
     "/test_pipeline_flux2.py::test_flux2_builds_whole_and_matches_diffusers",
     "/test_pipeline_flux2.py::test_flux2_builds_whole_and_matches_diffusers"),
    ("Flux2KleinPipeline", "text to image",
     "/test_pipeline_flux2.py::test_flux2_klein_builds_whole_and_matches_diffusers",
     "/test_pipeline_flux2.py::test_flux2_klein_builds_whole_and_matches_diffusers"),
    ("ZImagePipeline", "text to image",
     "/test_pipeline_z_image.py::test_z_image_builds_whole_and_matches_diffusers",
     "/test_pipeline_z_image.py::test_z_image_builds_whole_and_matches_diffusers"),
)  # fmt: skip


def _test_file(test: str) -> Path:
    file = test.split("::")[0]
    return ROOT_TESTS / file[1:] if file.startswith("/") else TESTS / file


def _test_key(test: str) -> str:
    """The ``module::function`` key of :func:`parity_results`."""
    file, function = test.split("::")
    return f"{Path(file).stem}::{function}"


def pipeline_markdown(passed: dict[str, dict[str, bool]]) -> str:
    """The pipeline table: whether each builds whole and runs end to end, by its tests."""

    def status(test: str | None) -> str:
        if test is None:
            return "not yet"
        cases = passed.get(_test_key(test), {})
        return "yes" if cases and all(cases.values()) else "FAILING"

    rows = [(name, what, status(b), status(r)) for name, what, b, r in PIPELINES]
    runs = sum(row[3] == "yes" for row in rows)
    return "\n".join([
        "## Pipelines",
        "",
        f"{runs} of {len(rows)} run end to end: a tiny random pipeline saved by diffusers "
        "(every parameter perturbed), built whole with `mobius build` and run by mobius's numpy "
        "runner over 2 steps from the same latents, equal to the diffusers pipeline within "
        "1e-3 on [0, 1] pixels.",
        "",
        "| pipeline | makes | builds whole | runs end to end |",
        "|---|---|---|---|",
        *(f"| `{name}` | {what} | {b} | {r} |" for name, what, b, r in rows),
        "",
    ])  # fmt: skip


#: Keys that are not diffusers classes themselves: the classes they stand for.
REFERENCE_CLASSES = {
    # a single-file IP-Adapter checkpoint; diffusers converts it into one of these
    "IPAdapterImageProjection": "ImageProjection, IPAdapterFullImageProjection, "
    "IPAdapterPlusImageProjection, IPAdapterFaceIDImageProjection or "
    "IPAdapterFaceIDPlusImageProjection",
}


def statuses(junit_xml: Path | None):
    """Task -> rows ``(key, diffusers class, status)``, and the test results read."""
    import mobius_diffusion

    registered = {k: cls.task for k, cls in mobius_diffusion.model_types().items()}
    targets = {cls for _task, _heading, _covers, table in KITS for cls in table}
    unlisted = sorted(set(registered) - targets)
    if unlisted:
        raise SystemExit(f"registered but not in this script's KITS: {unlisted}")
    files = {TESTS / f for *_, table in KITS for f, _ in table.values()}
    files |= {_test_file(t) for *_, b, r in PIPELINES for t in (b, r) if t}
    passed = parity_results(sorted(f for f in files if f.is_file()), junit_xml)
    tables = {}
    for task, _heading, _covers, table in KITS:
        rows = []
        for cls, (_file, test) in sorted(table.items()):
            cases = passed.get(test, {})
            if registered.get(cls) == task:
                ok = bool(cases) and all(cases.values())
                status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
            else:
                status = "not yet"
            rows.append((cls, REFERENCE_CLASSES.get(cls, cls), status))
        tables[task] = rows
    return tables, passed


def parity_tests() -> dict[str, str]:
    """Registry key -> the parity test of its class (``tests/FILE::FUNCTION``); nothing runs."""
    tests: dict[str, str] = {}
    for *_, table in KITS:
        for cls, (file, test) in table.items():
            add_test(tests, cls, file, test)
    return tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-run",
        type=Path,
        metavar="RESULTS.xml",
        help="read parity results from this JUnit XML instead of running the tests",
    )
    tables, passed = statuses(parser.parse_args().no_run)
    import diffusers

    sections = [(heading, covers, tables[task]) for task, heading, covers, _ in KITS]
    text, verified = support_markdown(
        "mobius-diffusion", diffusers.__version__, sections, "diffusers", "class"
    )
    pipelines = pipeline_markdown(passed)
    OUTPUT.write_text(text.rstrip("\n") + "\n\n" + pipelines)
    write_verified(VERIFIED, verified, diffusers.__version__, "diffusers", tests=parity_tests())
    print(f"wrote {OUTPUT} and {VERIFIED.name}: {len(verified)} verified")
    if "FAILING" in pipelines or any(
        "FAILING" in row[2] for rows in tables.values() for row in rows
    ):
        sys.exit(1)


if __name__ == "__main__":
    main()
