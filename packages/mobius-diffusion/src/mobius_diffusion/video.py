"""Video output of ``mobius generate``: an animated WebP (or GIF) through Pillow, or a folder of PNG frames.

No ffmpeg: Pillow (a ``run`` dependency) writes every format here.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import read_json

#: Default frame rate of a written video (Wan 2.1 is trained on 16 fps clips).
DEFAULT_FPS = 16.0

#: Animated formats Pillow writes, by file suffix.
ANIMATED_SUFFIXES = {".webp": "WEBP", ".gif": "GIF"}

#: ``mobius generate`` options only a video package reads.
VIDEO_OPTIONS = {"frames": "--frames", "fps": "--fps"}


def makes_video(package_dir: str | os.PathLike, options: dict) -> bool:
    """Whether the package's runner makes videos; ``--frames``/``--fps`` given to an image
    package are refused (a one-line ConfigError). An unknown pipeline class is left to
    :func:`mobius_diffusion.pipeline.open_pipeline` to refuse."""
    from mobius_diffusion.pipeline import RUNNERS

    name = read_json(Path(package_dir) / "model_index.json").get("_class_name")
    video = bool(
        getattr(RUNNERS.get(name) if isinstance(name, str) else None, "makes_video", False)
    )
    given = [flag for dest, flag in VIDEO_OPTIONS.items() if options.get(dest) is not None]
    if given and not video and isinstance(name, str) and name in RUNNERS:
        raise ConfigError(
            f"{' and '.join(given)} apply to video packages; {package_dir} is a {name}"
        )
    if video:  # refused before the minutes of denoising, not after
        fps = options.get("fps")
        if fps is not None and not fps > 0:
            raise ConfigError(f"--fps must be positive, not {fps}")
        if options.get("output_file"):
            animation_format(options["output_file"])
    return video


def animation_format(output: str | os.PathLike) -> str | None:
    """Pillow's format for a video file ``output`` (``"WEBP"``, ``"GIF"``), or None for a
    directory of PNG frames (an existing one, or a path ending in a separator)."""
    if Path(output).is_dir() or str(output).endswith(("/", os.sep)):
        return None
    kind = ANIMATED_SUFFIXES.get(Path(output).suffix.lower())
    if kind is None:
        raise ConfigError(
            f"a video is written as an animated .webp or .gif, or as PNG frames into a "
            f"directory; not {output}"
        )
    return kind


def write_video(frames: np.ndarray, output: str | os.PathLike, fps: float = DEFAULT_FPS) -> None:
    """Write ``frames`` ``[frames, H, W, 3]`` in [0, 1] to ``output``.

    An existing directory, or a path ending in a separator, gets one PNG per frame
    (``frame_00000.png``...); a ``.webp`` (lossy, quality 90) or ``.gif`` file gets an
    animation looping forever at ``fps`` frames a second. Example::

        write_video(pipe("a cat", num_frames=33)[0], "cat.webp", fps=16)
    """
    from mobius_diffusion.pipeline import to_pil

    if not fps > 0:
        raise ConfigError(f"--fps must be positive, not {fps}")
    images = to_pil(frames)
    path, kind = Path(output), animation_format(output)
    if kind is None:
        path.mkdir(parents=True, exist_ok=True)
        for number, image in enumerate(images):
            image.save(path / f"frame_{number:05d}.png")
        return
    extra = {"quality": 90} if kind == "WEBP" else {}
    images[0].save(
        path,
        format=kind,
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / fps),
        loop=0,
        **extra,
    )
