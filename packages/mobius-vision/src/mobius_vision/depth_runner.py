"""Estimate depth with a built depth-estimation package, as transformers' depth pipeline does.

The package's graph takes ``pixel_values`` and returns ``predicted_depth``
(:mod:`mobius_vision.tasks.depth_estimation`). Each image is loaded as the pipeline
loads it (EXIF orientation applied, RGB), made into pixels by the numpy twin of the
package's image processor (``preprocessor_config.json``: DPT's, which Depth Anything
uses too: resize keeping the aspect ratio to a multiple of ``ensure_multiple_of``,
PIL's resampling, rescale, normalise, optional centre padding; GLPN's: each side
rounded down to a multiple of 32, rescale; Prompt Depth Anything's: DPT's, and the
``--prompt-depth`` file in metres), run, and the depth is
resized back to the image's size as ``post_process_depth_estimation`` does (PyTorch's
bicubic, ``align_corners=False``).

Example::

    from mobius_vision.depth_runner import DepthEstimator

    depth = DepthEstimator("depth-anything-out/").depth("room.jpg")  # [height, width] float32

Needs ONNX Runtime and Pillow: ``pip install mobius-vision[run]``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.errors import MobiusError
from mobius.generate import ORT_FLOAT_TYPES, PackageError, _read_json
from mobius_vision.classifier import graph_io
from mobius_vision.processing._image import (
    BICUBIC,
    BILINEAR,
    ImageSettings,
    flag,
    image_size,
    integer,
    number,
    resize,
    to_chw,
)
from mobius_vision.processing.classification import IMAGENET_STANDARD, load_image, processor_type
from mobius_vision.processing.phi4_multimodal import torch_bicubic

#: The largest 16-bit PNG value: the depth map's range is stretched over [0, 65535].
PNG_MAX = 65535


#: The inputs a depth graph may take: the pixels, then Prompt Depth Anything's prompt.
DEPTH_INPUTS = (["pixel_values"], ["pixel_values", "prompt_depth"])


def is_depth_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package's ``model.onnx`` takes ``pixel_values`` (and a ``prompt_depth``) and
    returns ``predicted_depth``."""
    io = graph_io(package_dir)
    return io is not None and io[0] in DEPTH_INPUTS and "predicted_depth" in io[1]


def multiple_of(value: float, multiple: int) -> int:
    """transformers' DPT ``constrain_to_multiple_of`` (no bounds): the nearest multiple (Python's
    round, halves to even); an image too small for one multiple is refused."""
    rounded = round(value / multiple) * multiple
    if rounded <= 0:
        raise MobiusError(
            f"the image is too small: a side of {value:g} pixels rounds to no {multiple}"
        )
    return rounded


@dataclass
class DptProcessor:
    """transformers' ``DPTImageProcessor`` (PIL backend): resize, rescale, normalise, pad."""

    settings: ImageSettings
    keep_aspect_ratio: bool = False
    ensure_multiple_of: int = 1
    size_divisor: int | None = None  # centre padding to a multiple, with do_pad

    @classmethod
    def from_dict(cls, raw: dict) -> DptProcessor:
        """The processor of a ``preprocessor_config.json`` dict, each value checked."""
        settings = ImageSettings.from_dict(
            raw,
            resample=BICUBIC,
            size={"height": 384, "width": 384},
            image_mean=IMAGENET_STANDARD[0],
            image_std=IMAGENET_STANDARD[1],
        )
        if not {"height", "width"} <= settings.size.keys():
            raise MobiusError(
                f"DPT's image processor needs size.height and .width, not {settings.size}"
            )
        pads = flag(raw, "do_pad", False)
        return cls(
            settings,
            keep_aspect_ratio=flag(raw, "keep_aspect_ratio", False),
            ensure_multiple_of=integer(raw, "ensure_multiple_of", 1, 1, 1 << 12),
            size_divisor=integer(raw, "size_divisor", None, 1, 1 << 12) if pads else None,
        )

    def target_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """DPT's ``get_resize_output_image_size``: the size closer to the image's scale, kept
        in ratio with ``keep_aspect_ratio``, each side a multiple of ``ensure_multiple_of``."""
        height, width = size
        scale_height = self.settings.size["height"] / height
        scale_width = self.settings.size["width"] / width
        if self.keep_aspect_ratio:
            if abs(1 - scale_width) < abs(1 - scale_height):
                scale_height = scale_width
            else:
                scale_width = scale_height
        multiple = self.ensure_multiple_of
        return multiple_of(scale_height * height, multiple), multiple_of(
            scale_width * width, multiple
        )

    def __call__(self, image) -> np.ndarray:
        """One image (a path, a PIL image or a uint8 array) as float32 ``[3, height, width]``."""
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        pixels = to_chw(image)
        if self.settings.do_resize:
            pixels = resize(pixels, self.target_size(image_size(pixels)), self.settings.resample)
        pixels = self.settings.finish(pixels)
        if self.size_divisor is not None:
            pixels = centre_pad(pixels, self.size_divisor)
        return pixels


def centre_pad(pixels: np.ndarray, divisor: int) -> np.ndarray:
    """Zero padding to a multiple of ``divisor`` on each side, split evenly (the odd pixel after)."""
    pads = [(0, 0)]
    for side in pixels.shape[1:]:
        extra = math.ceil(side / divisor) * divisor - side
        pads.append((extra // 2, extra - extra // 2))
    return np.pad(pixels, pads)


@dataclass
class PromptDepthProcessor(DptProcessor):
    """transformers' ``PromptDepthAnythingImageProcessor``: DPT's pixels, and the prompt depth
    (a depth image, or a 2-D ``.npy``) scaled by ``prompt_scale_to_meter`` (millimetres to
    metres by default), a flat one nudged by 1e-6 at its first pixel as transformers does."""

    prompt_scale_to_meter: float = 0.001

    @classmethod
    def from_dict(cls, raw: dict) -> PromptDepthProcessor:
        dpt = DptProcessor.from_dict(raw)
        scale = number(raw, "prompt_scale_to_meter", 0.001)
        if scale <= 0:
            raise MobiusError(
                f"preprocessor setting prompt_scale_to_meter must be > 0, not {scale}"
            )
        return cls(
            dpt.settings, dpt.keep_aspect_ratio, dpt.ensure_multiple_of, dpt.size_divisor, scale
        )

    def prompt(self, path: str | os.PathLike) -> np.ndarray:
        """The prompt depth file at ``path`` as float32 ``[1, 1, height, width]``, in metres."""
        depth = read_depth_file(Path(path)).astype(np.float64) * self.prompt_scale_to_meter
        if depth.min() == depth.max():
            depth[0, 0] += 1e-6
        return depth.astype(np.float32)[None, None]


def read_depth_file(path: Path) -> np.ndarray:
    """A 2-D depth map from a ``.npy`` file or a single-channel image (a 16-bit PNG...)."""
    if not path.is_file():
        raise MobiusError(f"no prompt depth file at {path}")
    try:
        if path.suffix.lower() == ".npy":
            depth = np.load(path, allow_pickle=False)
        else:
            from PIL import Image

            with Image.open(path) as image:
                depth = np.asarray(image)
    except (OSError, ValueError) as exc:  # not an image or array, truncated
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MobiusError(f"cannot read {path} as a depth map: {reason}") from None
    kinds = (np.integer, np.floating)
    if depth.ndim != 2 or not any(np.issubdtype(depth.dtype, k) for k in kinds):
        raise MobiusError(f"{path} is not a single-channel depth map ({depth.dtype} {depth.shape})")
    if not np.isfinite(depth).all():
        raise MobiusError(f"{path} holds values that are not finite")
    return depth


@dataclass
class GlpnProcessor:
    """transformers' ``GLPNImageProcessor`` (PIL backend): each side rounded down to a multiple
    of ``size_divisor`` (bilinear), rescaled; normalised only where the config asks."""

    settings: ImageSettings
    size_divisor: int = 32

    @classmethod
    def from_dict(cls, raw: dict) -> GlpnProcessor:
        settings = ImageSettings.from_dict(raw, resample=BILINEAR, do_normalize=False)
        return cls(settings, integer(raw, "size_divisor", 32, 1, 1 << 12))

    def __call__(self, image) -> np.ndarray:
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        pixels = to_chw(image)
        if self.settings.do_resize:
            height, width = image_size(pixels)
            divisor = self.size_divisor
            target = (height // divisor * divisor, width // divisor * divisor)
            if min(target) == 0:
                raise MobiusError(
                    f"the image ({height}x{width}) is smaller than GLPN's {divisor}-pixel multiple"
                )
            pixels = resize(pixels, target, self.settings.resample)
        return self.settings.finish(pixels)


#: transformers' image processor classes mobius depth reproduces.
PROCESSORS = {
    "DPTImageProcessor": DptProcessor.from_dict,
    "GLPNImageProcessor": GlpnProcessor.from_dict,
    "PromptDepthAnythingImageProcessor": PromptDepthProcessor.from_dict,
}


def depth_processor(raw: dict):
    """The processor a ``preprocessor_config.json`` dict describes (values checked)."""
    name = processor_type(raw)
    make = PROCESSORS.get(name)
    if make is None:
        raise PackageError(
            f"mobius depth has no image processor like transformers' {name} yet "
            f"(it has {', '.join(sorted(PROCESSORS))})"
        )
    return make(raw)


def load_depth_processor(package_dir: str | os.PathLike):
    """The image processor of a built depth package (its ``preprocessor_config.json``)."""
    path = Path(package_dir) / "preprocessor_config.json"
    if not path.is_file():
        raise PackageError(
            f"no preprocessor_config.json in {package_dir}: build from a checkpoint that has "
            "its image processor"
        )
    return depth_processor(_read_json(path))


class DepthEstimator:
    """A depth-estimation package in ONNX Runtime, with its image processor."""

    def __init__(self, package_dir: str | os.PathLike, *, threads: int | None = None) -> None:
        self.package_dir = Path(package_dir)
        if not is_depth_package(self.package_dir):
            raise PackageError(
                f"{self.package_dir} is not a depth-estimation package (its model.onnx must take "
                "pixel_values and return predicted_depth)"
            )
        self.session = open_session(self.package_dir / "model.onnx", threads)
        pixels = self.session.get_inputs()[0]
        self.pixel_type = ORT_FLOAT_TYPES.get(pixels.type)
        if self.pixel_type is None:
            raise PackageError(
                f"{self.package_dir} takes {pixels.type} pixels; ONNX Runtime's Python API "
                "feeds float32 and float16 only (build with --dtype f32 or f16)"
            )
        self.pixel_shape = pixels.shape[1:]  # channels, then fixed sizes or dimension names
        self.takes_prompt = len(self.session.get_inputs()) == 2  # prompt_depth
        self.processor = load_depth_processor(self.package_dir)
        if self.takes_prompt and not isinstance(self.processor, PromptDepthProcessor):
            raise PackageError(f"{self.package_dir} takes a prompt depth its processor cannot make")

    def predicted_depth(self, pixels: np.ndarray, prompt: np.ndarray | None = None) -> np.ndarray:
        """The graph's raw ``predicted_depth`` ``[height', width']`` for ``[3, h, w]`` pixels
        (and a ``[1, 1, h, w]`` prompt depth, for a package that takes one)."""
        for got, want in zip(pixels.shape, self.pixel_shape, strict=True):
            if isinstance(want, int) and got != want:
                raise PackageError(
                    f"the image processor of {self.package_dir} makes {list(pixels.shape)} "
                    f"pixels; its graph takes {self.pixel_shape}"
                )
        feed = {"pixel_values": pixels[None].astype(self.pixel_type)}
        if prompt is not None:
            feed["prompt_depth"] = prompt.astype(self.pixel_type)
        (depth,) = self.session.run(["predicted_depth"], feed)
        return np.asarray(depth[0], np.float32)

    def check_prompt(self, prompt_path) -> None:
        """Refuse a prompt depth the package does not take, or the lack of one it needs."""
        if self.takes_prompt and prompt_path is None:
            raise MobiusError(
                f"{self.package_dir} (Prompt Depth Anything) needs the image's low-resolution "
                "depth: give it with --prompt-depth FILE"
            )
        if prompt_path is not None and not self.takes_prompt:
            raise MobiusError(f"{self.package_dir} takes no prompt depth (--prompt-depth)")

    def depth(self, image, prompt_path: str | os.PathLike | None = None) -> np.ndarray:
        """The depth map of ``image`` (a path, PIL image or uint8 array) at the image's size;
        ``prompt_path``: its prompt depth file, for a Prompt Depth Anything package."""
        self.check_prompt(prompt_path)
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        pixels = to_chw(image)
        prompt = None if prompt_path is None else self.processor.prompt(prompt_path)
        depth = self.predicted_depth(self.processor(image), prompt)
        return torch_bicubic(depth[None], image_size(pixels))[0]


def depth_png(depth: np.ndarray) -> np.ndarray:
    """``depth`` stretched over 16 bits: ``(depth - min) / (max - min) * 65535``, rounded
    (all zeros for a flat map)."""
    low, high = float(depth.min()), float(depth.max())
    if high <= low:
        return np.zeros(depth.shape, np.uint16)
    scaled = (depth.astype(np.float64) - low) / (high - low) * PNG_MAX
    return np.rint(scaled).astype(np.uint16)


def default_png(image_path: str) -> Path:
    """``<image stem>-depth.png`` in the current directory."""
    return Path(f"{Path(image_path).stem}-depth.png")


def run_cli(package_dir: str | os.PathLike, inputs: list[str], options: dict) -> int:
    """mobius-vision's ``mobius depth`` runner: a 16-bit PNG (and ``--raw`` .npy) per image,
    and a line with its depth range."""
    png, raw = options.get("depth_png"), options.get("depth_raw")
    prompt = options.get("depth_prompt")
    if len(inputs) > 1 and (png or raw or prompt):
        raise MobiusError(
            "--output, --raw and --prompt-depth name one file: give one image with them, or "
            "several images without (each gets <stem>-depth.png here)"
        )
    for path in inputs:
        if not Path(path).is_file():
            raise MobiusError(f"no image file at {path}")
    estimator = DepthEstimator(package_dir, threads=options.get("threads"))
    estimator.check_prompt(prompt)  # before any image is read
    from PIL import Image

    for path in inputs:
        depth = estimator.depth(path, prompt)
        target = Path(png) if png else default_png(path)
        Image.fromarray(depth_png(depth)).save(target, format="PNG")
        if raw:
            np.save(raw, depth)
        saved = f"{target}" + (f", {raw}" if raw else "")
        print(f"{path}: depth min {depth.min():.6g} max {depth.max():.6g} -> {saved}")
    return 0
