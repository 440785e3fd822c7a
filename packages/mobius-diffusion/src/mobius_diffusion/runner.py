"""``mobius generate`` on a built diffusion pipeline: PROMPT to an image file.

The runner mobius-diffusion registers: it takes a package with
``model_index.json`` and runs it with :func:`mobius_diffusion.pipeline.open_pipeline`.
"""

from __future__ import annotations

import inspect
import os

from mobius.errors import ConfigError


def is_pipeline_package(package_dir: str | os.PathLike) -> bool:
    """Whether a built package is a diffusion pipeline (it holds ``model_index.json``)."""
    return os.path.isfile(os.path.join(package_dir, "model_index.json"))


def run_image_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """Generate one image from ``prompt`` and write it to ``--output`` (default ``image.png``);
    a video package writes a video (default ``video.webp``; see :mod:`mobius_diffusion.video`).

    ``options`` are the parsed ``mobius generate`` options by dest: ``steps``,
    ``seed``, ``guidance_scale``, ``negative_prompt``, ``height``, ``width``, ``class_label``,
    ``output_file``, ``threads``; video packages also ``frames`` and ``fps``. A
    class-conditional (DiT) package takes its class as PROMPT (a label name) or as
    ``--class-label`` with PROMPT "".
    """
    from mobius_diffusion.pipeline import open_pipeline, to_pil
    from mobius_diffusion.video import DEFAULT_FPS, makes_video, write_video

    video = makes_video(package_dir, options)  # --frames/--fps on an image package: refused
    pipe = open_pipeline(package_dir, threads=options.get("threads"))
    pipe.progress = True
    if options.get("vae_tiling"):
        from mobius_diffusion.tiling import tile_plan

        if not (pipe.package_dir / "vae" / "config.json").is_file():  # Kandinsky's movq...
            raise ConfigError(
                f"--vae-tiling: a {pipe.index.get('_class_name')} decodes with no vae component; "
                "tiled decodes are for pipelines whose vae is an AutoencoderKL, "
                "AutoencoderKLCogVideoX, AutoencoderKLWan or AutoencoderKLQwenImage"
            )
        tile_plan(pipe.config("vae"))  # a VAE without a tiled decode: refused before denoising
        pipe.vae_tiling = True
    call = {"num_inference_steps": options.get("steps", 20), "seed": options.get("seed")}
    if options.get("guidance_scale") is not None:
        call["guidance_scale"] = options["guidance_scale"]
    call.update(_subject(pipe, prompt, options))
    if options.get("negative_prompt") is not None:
        if "negative_prompt" not in inspect.signature(pipe.__call__).parameters:
            raise ConfigError(
                f"a {pipe.index.get('_class_name')} takes no negative prompt; drop "
                "--negative-prompt"
            )
        call["negative_prompt"] = options["negative_prompt"]
    _image_inputs(pipe, options, call)
    _control_inputs(pipe, options, call)
    _ip_adapter_inputs(pipe, options, call)
    if video:  # a video package (Wan): frames to an animated WebP or a folder of PNGs
        if options.get("frames") is not None:
            call["num_frames"] = options["frames"]
        output = options.get("output_file") or "video.webp"
        fps = options.get("fps")
        if fps is not None and "fps" in inspect.signature(pipe.__call__).parameters:
            call["fps"] = fps  # a runner conditioned on it (SVD) makes what it is played at
        default = getattr(pipe, "default_fps", DEFAULT_FPS)
        write_video(pipe(**call)[0], output, default if fps is None else fps)
        print(f"wrote {output}")
        return 0
    image = to_pil(pipe(**call))[0]
    output = options.get("output_file") or "image.png"
    image.save(output)
    print(f"wrote {output}")
    return 0


def _subject(pipe, prompt: str, options: dict) -> dict:
    """What the image is of: the prompt and size, or a DiT package's class (its size is fixed)."""
    from mobius_diffusion.pipeline import DiTRunner

    class_label = options.get("class_label")
    sizes = {name: options[name] for name in ("height", "width") if options.get(name) is not None}
    if not isinstance(pipe, DiTRunner):
        if class_label is not None:
            raise ConfigError(
                f"--class-label is for class-conditional (DiT) packages; "
                f"{pipe.package_dir} is a {pipe.index.get('_class_name')}"
            )
        return {"prompt": prompt, **sizes}
    if sizes:
        raise ConfigError(
            "a DiT package draws images of its sample_size; --height/--width do not apply"
        )
    if class_label is None:
        return {"prompt": prompt}
    if prompt:
        raise ConfigError('give the class as PROMPT or as --class-label with PROMPT "", not both')
    return {"class_labels": [class_label]}


def _image_inputs(pipe, options: dict, call: dict) -> None:
    """``--image`` (the ``images`` option), ``--mask-image``, ``--last-image`` and ``--strength``
    into ``call`` for a runner that starts from an image (its ``image_inputs``, and the
    ``optional_image_inputs`` it may take); each is refused where the package takes none,
    and one the package needs is asked for."""
    import inspect

    takes = getattr(pipe, "image_inputs", ())
    optional = getattr(pipe, "optional_image_inputs", ())  # Wan 2.2 TI2V's --image...
    kind = pipe.index.get("_class_name")
    images = options.get("images") or []
    if len(images) > 1:
        raise ConfigError(f"a {kind} package takes one --image, not {len(images)}")
    given = {"image": images[0] if images else None, "mask_image": options.get("mask_image")}
    given["last_image"] = options.get("last_image")
    takers = {"image": "image-to-image and inpainting", "mask_image": "inpainting"}
    takers["last_image"] = "Wan first-last-frame"
    flags = (("image", "--image"), ("mask_image", "--mask-image"), ("last_image", "--last-image"))
    for name, flag in flags:
        if given[name] is None and name in takes:
            needs = "ends on a last frame" if name == "last_image" else "starts from an image"
            raise ConfigError(f"a {kind} package {needs}: give {flag} FILE")
        if given[name] is not None and name not in (*takes, *optional):
            raise ConfigError(
                f"a {kind} package takes no {flag} ({takers[name]} packages do): {pipe.package_dir}"
            )
        if given[name] is not None:
            call[name] = given[name]
    if options.get("strength") is not None:
        if not takes:
            raise ConfigError(f"--strength is for packages that start from an image, not a {kind}")
        if "strength" not in inspect.signature(pipe.__call__).parameters:  # Kontext's edit
            raise ConfigError(
                f"a {kind} runs every step from its --image; --strength does not apply"
            )
        call["strength"] = options["strength"]
    sized = "height" in inspect.signature(pipe.__call__).parameters  # inpainting resizes
    if takes and not sized and ("height" in call or "width" in call):
        raise ConfigError(f"a {kind} keeps the size of its --image; --height/--width do not apply")


def _ip_adapter_inputs(pipe, options: dict, call: dict) -> None:
    """``--ip-adapter-image``, ``--ip-adapter-image-embeds``, ``--ip-adapter-scale`` and
    ``--ip-adapter-shortcut-scale`` into ``call`` for a package built with ``--ip-adapter``
    (the runner checks which of the image and the embeddings its adapter reads); refused
    for other packages."""
    import numpy as np

    from mobius_diffusion.pipelines.ip_adapter import IPAdapterMixin

    names = ("ip_adapter_image", "ip_adapter_image_embeds", "ip_adapter_scale")
    names += ("ip_adapter_shortcut_scale",)
    given = {name: options.get(name) for name in names if options.get(name) is not None}
    if not isinstance(pipe, IPAdapterMixin):
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ConfigError(
                f"{flags}: for packages built with --ip-adapter; {pipe.package_dir} is not one"
            )
        return
    if not {"ip_adapter_image", "ip_adapter_image_embeds"} & set(given):
        raise ConfigError(
            "an IP-Adapter package draws from an image prompt: give --ip-adapter-image FILE "
            "(FaceID: --ip-adapter-image-embeds FILE.npy)"
        )
    path = given.get("ip_adapter_image_embeds")
    if path is not None:
        try:
            given["ip_adapter_image_embeds"] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"--ip-adapter-image-embeds {path}: not a .npy array ({exc})"
            ) from None
    call.update(given)


def _control_inputs(pipe, options: dict, call: dict) -> None:
    """``--control-image`` and ``--control-scale`` into ``call`` for a ControlNet or T2I-Adapter
    runner (its ``control_scale_option`` names the scale); refused for other packages, and
    asked for where the package needs it."""
    image, scale = options.get("control_image"), options.get("control_scale")
    scale_option = getattr(pipe, "control_scale_option", None)
    kind = pipe.index.get("_class_name")
    if scale_option is None:
        if image is not None or scale is not None:
            raise ConfigError(
                f"--control-image and --control-scale are for ControlNet and T2I-Adapter "
                f"packages; {pipe.package_dir} is a {kind}"
            )
        return
    if image is None:
        raise ConfigError(
            f"a {kind} package draws under a condition image: give --control-image FILE"
        )
    call["image"] = image
    if scale is not None:
        call[scale_option] = scale
