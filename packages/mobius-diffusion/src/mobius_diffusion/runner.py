"""``mobius generate`` on a built diffusion pipeline: PROMPT to an image file.

The runner mobius-diffusion registers: it takes a package with
``model_index.json`` and runs it with :func:`mobius_diffusion.pipeline.open_pipeline`.
"""

from __future__ import annotations

import os

from mobius.errors import ConfigError


def is_pipeline_package(package_dir: str | os.PathLike) -> bool:
    """Whether a built package is a diffusion pipeline (it holds ``model_index.json``)."""
    return os.path.isfile(os.path.join(package_dir, "model_index.json"))


def run_image_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """Generate one image from ``prompt`` and write it to ``--output`` (default ``image.png``).

    ``options`` are the parsed ``mobius generate`` options by dest: ``steps``,
    ``seed``, ``guidance_scale``, ``height``, ``width``, ``class_label``,
    ``output_file``, ``threads``. A class-conditional (DiT) package takes its class
    as PROMPT (a label name) or as ``--class-label`` with PROMPT "".
    """
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    pipe = open_pipeline(package_dir, threads=options.get("threads"))
    pipe.progress = True
    call = {"num_inference_steps": options.get("steps", 20), "seed": options.get("seed")}
    if options.get("guidance_scale") is not None:
        call["guidance_scale"] = options["guidance_scale"]
    call.update(_subject(pipe, prompt, options))
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
