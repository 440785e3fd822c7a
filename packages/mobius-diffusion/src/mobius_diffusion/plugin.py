"""mobius-diffusion's slice beyond its model types: tasks, source recognisers, CLI options, runners.

- tasks: ``vae``, ``denoising``, ``controlnet``, ``adapter`` (:mod:`mobius_diffusion.tasks`);
- sources: a whole pipeline directory (:mod:`mobius_diffusion.pipeline_source`), a
  component directory and a lone adapter ``.safetensors`` (:mod:`mobius_diffusion.source`);
- ``mobius build --skip-component``;
- the ``mobius generate`` runner of pipeline packages (:mod:`mobius_diffusion.runner`)
  and its options (``--steps``, ``--height``, ``--width``, ``--class-label``, ``--frames``,
  ``--fps``, ``--mask-image``, ``--strength``; it reads core's
  ``--guidance-scale``).

Everything is named by lazy ``"module:attribute"`` strings: registering imports nothing.
"""

from __future__ import annotations

from mobius.plugins import CliOption, RunnerInfo, SourceInfo, TaskInfo

PACKAGE = "mobius-diffusion"

TASKS = {
    "vae": "VAETask",
    "denoising": "DenoisingTask",
    "controlnet": "ControlNetTask",
    "adapter": "AdapterTask",
}

GROUP = "diffusion pipelines"

PIPELINE_HELP = (
    "A diffusers pipeline (model_index.json) is built whole: each model component into "
    "OUTPUT_DIR/<component>/ (unet/model.onnx, vae/decoder/model.onnx, "
    "text_encoder/model.onnx...), its tokenizers, scheduler and model_index.json copied "
    "(mobius-diffusion)."
)

RUNNER_HELP = (
    "A diffusion pipeline package (model_index.json: Stable Diffusion 1.x/2.x, SDXL, SD3,\n"
    "Flux.1/2, PixArt, Sana, Qwen-Image, HiDream, Z-Image, Kandinsky, Stable Cascade...;\n"
    "mobius-diffusion's SUPPORT.md lists them) turns PROMPT into an image written to\n"
    "--output, from the noise of --seed over --steps scheduler steps; a DiT package takes an\n"
    'ImageNet class: PROMPT names it, or --class-label N with PROMPT ""; a DDPM package\n'
    'draws an unconditional image, with PROMPT "". A video package (Wan, LTX-Video,\n'
    "HunyuanVideo, CogVideoX, Mochi, AnimateDiff) makes --frames frames, written as an\n"
    "animated .webp or .gif, or as PNG frames when --output is a directory; an image-to-video\n"
    "one (SVD, Wan I2V; Wan 2.2 TI2V optionally) starts from --image, a Wan FLF2V one also\n"
    "ends on --last-image. A ControlNet or T2I-Adapter package follows\n"
    "--control-image; an IP-Adapter one --ip-adapter-image (FaceID: --ip-adapter-image-embeds).\n"
    "An image-to-image package redraws\n"
    "--image (--strength: how far); an inpainting one repaints it where --mask-image is white;\n"
    "an edit package (Flux Kontext, Qwen-Image Edit) edits --image as PROMPT says.\n"
    "--vae-tiling decodes large images in tiles (mobius-diffusion; pip install\n"
    "mobius-diffusion[run])."
)


def register_slice(registry) -> None:
    """Register what mobius-diffusion owns besides its model types (safe to call twice)."""
    for name, task in TASKS.items():
        validate = "mobius_diffusion.validate:validate_component"  # one for every component
        registry.register_task(
            TaskInfo(name, f"mobius_diffusion.tasks:{task}", PACKAGE, validate=validate)
        )
    # A whole pipeline's package: its source assembles it from the components' tasks.
    registry.register_task(
        TaskInfo("pipeline", None, PACKAGE, validate="mobius_diffusion.validate:validate_pipeline")
    )
    for name, recognise in (
        ("diffusers-pipeline", "mobius_diffusion.pipeline_source:recognise_pipeline"),
        ("diffusers-component", "mobius_diffusion.source:recognise_component"),
        ("safetensors-adapter", "mobius_diffusion.source:recognise_weights_file"),
    ):
        pipeline = name == "diffusers-pipeline"
        registry.register_source(
            SourceInfo(
                name,
                recognise,
                PACKAGE,
                help=PIPELINE_HELP if pipeline else "",
                hub_files="mobius_diffusion.pipeline_source:hub_files" if pipeline else None,
            )
        )
    registry.register_option(
        CliOption(
            "build",
            "skip_component",
            ("--skip-component",),
            dict(
                action="append",
                metavar="NAME",
                help="diffusers pipelines: leave out component NAME of model_index.json (a "
                "safety_checker, say); a component mobius neither builds nor copies is "
                "otherwise an error. Repeatable",
            ),
            tasks=("pipeline",),
            group=GROUP,
            package=PACKAGE,
        )
    )
    registry.register_option(
        CliOption(
            "build",
            "unet_residuals",
            ("--unet-residuals",),
            dict(
                default=None,
                choices=("controlnet", "adapter"),
                help="UNet2DConditionModel: also take a ControlNet's residuals "
                "(down_block_additional_residuals.I, mid_block_additional_residual) or a "
                "T2I-Adapter's features (down_intrablock_additional_residuals.I). A whole "
                "pipeline with a controlnet or adapter component sets it for its unet. "
                "Example: mobius build --model sd/unet unet/ --unet-residuals controlnet",
            ),
            tasks=("denoising",),
            group=GROUP,
            package=PACKAGE,
        )
    )
    registry.register_option(
        CliOption(
            "build",
            "ip_adapter",
            ("--ip-adapter",),
            dict(
                default=None,
                metavar="FILE",
                help="an IP-Adapter .safetensors file in the original layout (plain, Full, "
                "Plus, FaceID, FaceID Plus / Plus v2; ip-adapter_sd15, ip-adapter-plus_sdxl_vit-h, "
                "ip-adapter-faceid_sd15...; FaceID's LoRA is merged into the UNet): a "
                "UNet2DConditionModel gets its image cross-attention "
                "(inputs ip_adapter_image_embeds, ip_adapter_scale; its ip_adapter.* tensors); "
                "a whole SD/SDXL pipeline also builds its image projection into ip_adapter/ "
                "(its image_proj.* tensors). Example: mobius build --model sd15/ out/ "
                "--ip-adapter ip-adapter_sd15.safetensors",
            ),
            tasks=("pipeline", "denoising"),
            group=GROUP,
            package=PACKAGE,
        )
    )
    for dest, flags, kwargs in (
        (
            "ip_adapter_image",
            ("--ip-adapter-image",),
            dict(
                default=None,
                metavar="FILE",
                help="packages built with --ip-adapter: the image prompt, which the image "
                "follows beside the text (FaceID Plus: the image beside the face embedding; "
                "FaceID: none)",
            ),
        ),
        (
            "ip_adapter_image_embeds",
            ("--ip-adapter-image-embeds",),
            dict(
                default=None,
                metavar="FILE.npy",
                help="packages built with --ip-adapter: the image prompt's embedding, "
                "precomputed (FaceID, FaceID Plus: the face embedding, e.g. insightface's "
                "normed_embedding, which mobius does not compute), as diffusers' "
                "ip_adapter_image_embeds for one adapter: float [2, num_images, D] with "
                "guidance (negative row first, zeros for FaceID's), [1, num_images, D] with "
                "--guidance-scale 1; D is the face embedding's width (FaceID, FaceID Plus, "
                "whose num_images is 1) or CLIP's image_embeds width (plain); Full and Plus "
                "take [.., num_images, image_tokens, width] penultimate hidden states",
            ),
        ),
        (
            "ip_adapter_shortcut_scale",
            ("--ip-adapter-shortcut-scale",),
            dict(
                type=float,
                default=None,
                metavar="S",
                help="IP-Adapter FaceID Plus v2: add the face tokens back, id + S * resampled "
                "(diffusers' shortcut=True, shortcut_scale=S; v2 uses 1.0); leave it out "
                "for FaceID Plus v1",
            ),
        ),
        (
            "ip_adapter_scale",
            ("--ip-adapter-scale",),
            dict(
                type=float,
                default=None,
                metavar="S",
                help="packages built with --ip-adapter: how strongly the image prompt steers, "
                "0 to 1 and more (default 1.0)",
            ),
        ),
        (
            "steps",
            ("--steps",),
            dict(type=int, default=20, metavar="N", help="denoising steps (default 20)"),
        ),
        ("height", ("--height",), dict(type=int, default=None, metavar="PX", help="image height")),
        ("width", ("--width",), dict(type=int, default=None, metavar="PX", help="image width")),
        (
            "negative_prompt",
            ("--negative-prompt",),
            dict(
                default=None,
                metavar="TEXT",
                help="what the image should not show: the unconditional prompt of classifier-free "
                "guidance (default the pipeline's, usually empty; Qwen-Image guides only when "
                "one is given)",
            ),
        ),
        (
            "class_label",
            ("--class-label",),
            dict(
                type=int,
                default=None,
                metavar="N",
                help='class-conditional (DiT) packages: the class id to draw, with PROMPT "" '
                "(PROMPT may instead name the class: an id2label name)",
            ),
        ),
        (
            "mask_image",
            ("--mask-image",),
            dict(
                default=None,
                metavar="FILE",
                help="inpainting packages: white where the --image is repainted, black where "
                "it is kept",
            ),
        ),
        (
            "last_image",
            ("--last-image",),
            dict(
                default=None,
                metavar="FILE",
                help="Wan image-to-video packages: the video's last frame, --image its first "
                "(needed by Wan 2.1 FLF2V, optional for Wan 2.2 A14B I2V)",
            ),
        ),
        (
            "strength",
            ("--strength",),
            dict(
                type=float,
                default=None,
                metavar="S",
                help="image-to-image and inpainting packages: how much of the schedule is run "
                "from the noised --image, 0 to 1 (default the pipeline's: 0.8 SD img2img, 0.3 "
                "SDXL img2img, 1.0 SD inpainting, 0.9999 SDXL inpainting)",
            ),
        ),
        (
            "control_image",
            ("--control-image",),
            dict(
                default=None,
                metavar="FILE",
                help="ControlNet and T2I-Adapter packages: the condition image (edges, depth, "
                "pose...) the image follows; its size is the image's unless --height/--width",
            ),
        ),
        (
            "control_scale",
            ("--control-scale",),
            dict(
                type=float,
                default=None,
                metavar="S",
                help="ControlNet and T2I-Adapter packages: how strongly the condition image "
                "steers, times its residuals (default 1.0)",
            ),
        ),
        (
            "frames",
            ("--frames",),
            dict(
                type=int,
                default=None,
                metavar="N",
                help="video packages: the number of frames (Wan, CogVideoX, HunyuanVideo: 4k+1, "
                "default 81, 49, 129; LTX-Video: 8k+1, default 161; AnimateDiff and SVD: any, "
                "default 16, 14)",
            ),
        ),
        (
            "vae_tiling",
            ("--vae-tiling",),
            dict(
                action="store_true",
                default=False,
                help="decode the latents in overlapping tiles, blended at the seams, as "
                "diffusers' vae.enable_tiling(): memory follows the tile, not the image or "
                "video frame (AutoencoderKL, CogVideoX, Wan and Qwen-Image VAEs); the seams "
                "differ slightly from a whole decode",
            ),
        ),
        (
            "fps",
            ("--fps",),
            dict(
                type=float,
                default=None,
                metavar="FPS",
                help="video packages: frames per second of the written animation (default 16)",
            ),
        ),
    ):
        registry.register_option(
            CliOption("generate", dest, flags, kwargs, group=GROUP, package=PACKAGE)
        )
    registry.register_runner(
        RunnerInfo(
            "diffusion-pipeline",
            accepts="mobius_diffusion.runner:is_pipeline_package",
            run="mobius_diffusion.runner:run_image_cli",
            package=PACKAGE,
            help=RUNNER_HELP,
            examples=(
                'mobius generate sd-out/ "a red bicycle" --steps 20 --seed 0 --output bicycle.png',
                'mobius generate dit-out/ "white shark" --steps 25 --seed 0 --output shark.png',
                'mobius generate sd-img2img-out/ "a watercolour" --image photo.png --strength 0.6',
                'mobius generate wan-out/ "a cat surfing" --frames 33 --seed 0 --output cat.webp',
                'mobius generate sd-controlnet-out/ "a house" --control-image edges.png --control-scale 0.8',
            ),
        )
    )
