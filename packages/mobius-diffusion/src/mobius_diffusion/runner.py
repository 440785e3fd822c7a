"""``mobius generate`` on a built diffusion pipeline: PROMPT to an image file.

The runner mobius-diffusion registers: it takes a package with
``model_index.json`` and runs it with :func:`mobius_diffusion.pipeline.open_pipeline`.
"""

from __future__ import annotations

import os


def is_pipeline_package(package_dir: str | os.PathLike) -> bool:
    """Whether a built package is a diffusion pipeline (it holds ``model_index.json``)."""
    return os.path.isfile(os.path.join(package_dir, "model_index.json"))


def run_image_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """Generate one image from ``prompt`` and write it to ``--output`` (default ``image.png``).

    ``options`` are the parsed ``mobius generate`` options by dest: ``steps``,
    ``seed``, ``guidance_scale``, ``height``, ``width``, ``output_file``, ``threads``.
    """
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    pipe = open_pipeline(package_dir, threads=options.get("threads"))
    pipe.progress = True
    call = {"num_inference_steps": options.get("steps", 20), "seed": options.get("seed")}
    for name in ("guidance_scale", "height", "width"):
        if options.get(name) is not None:
            call[name] = options[name]
    image = to_pil(pipe(prompt, **call))[0]
    output = options.get("output_file") or "image.png"
    image.save(output)
    print(f"wrote {output}")
    return 0
