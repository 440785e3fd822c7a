"""Estimate depth with a built depth-estimation package, as transformers' depth pipeline does.

The package's graph takes ``pixel_values`` and returns ``predicted_depth``
(:mod:`mobius_vision.tasks.depth_estimation`). Each image is loaded as the pipeline
loads it (EXIF orientation applied, RGB), made into pixels by the numpy twin of the
package's image processor (``preprocessor_config.json``: DPT's, which Depth Anything
uses too: resize keeping the aspect ratio to a multiple of ``ensure_multiple_of``,
PIL's resampling, rescale, normalise, optional centre padding; GLPN's: each side
rounded down to a multiple of 32, rescale; Prompt Depth Anything's: DPT's, and the
``--prompt-depth`` file in metres; Depth Pro's: rescale and normalise, then PyTorch's
bilinear to its fixed size; ZoeDepth's: rescale, reflect padding, DPT's resize with
PyTorch's bilinear, normalise), run, and the depth is
resized back to the image's size as ``post_process_depth_estimation`` does (PyTorch's
bicubic, ``align_corners=False``; Depth Pro's turns its inverse depth into depth, metric
with the focal length its ``field_of_view`` gives; ZoeDepth's padding is cropped off).

Example::

    from mobius_vision.depth_runner import DepthEstimator

    depth = DepthEstimator("depth-anything-out/").depth("room.jpg")  # [height, width] float32
    found = DepthEstimator("depth-pro-out/").estimate("street.jpg")  # Depth Pro, FOV head
    found.depth, found.field_of_view, found.focal_length  # metres, degrees, pixels

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
    normalize,
    number,
    rescale,
    resize,
    to_chw,
)
from mobius_vision.processing.classification import IMAGENET_STANDARD, load_image, processor_type
from mobius_vision.processing.molmo2 import bilinear as torch_bilinear
from mobius_vision.processing.phi4_multimodal import torch_bicubic
from mobius_vision.processing.zoedepth import (
    bilinear_align_corners,
    constrain_to_multiple,
    reflect_pad,
    remove_padding,
)

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


def sized_settings(raw: dict, family: str, resample: int, side: int) -> ImageSettings:
    """The settings of a processor that resizes to ``size.height`` x ``.width`` (defaults:
    ``side`` square, ImageNet-standard mean and std), refusing a size without them."""
    settings = ImageSettings.from_dict(
        raw,
        resample=resample,
        size={"height": side, "width": side},
        image_mean=IMAGENET_STANDARD[0],
        image_std=IMAGENET_STANDARD[1],
    )
    if not {"height", "width"} <= settings.size.keys():
        raise MobiusError(
            f"{family}'s image processor needs size.height and .width, not {settings.size}"
        )
    return settings


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
        settings = sized_settings(raw, "DPT", BICUBIC, 384)
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
        return self.constrain(scale_height * height), self.constrain(scale_width * width)

    def constrain(self, value: float) -> int:
        """A scaled side made a multiple of ``ensure_multiple_of``."""
        return multiple_of(value, self.ensure_multiple_of)

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


@dataclass
class DepthEstimate:
    """One image's depth map at its size; Depth Pro's field of view (degrees) and the focal
    length (pixels) it gives, where the package has a field-of-view head."""

    depth: np.ndarray
    field_of_view: float | None = None
    focal_length: float | None = None


#: PyTorch's interpolation (no antialiasing) of a ``[c, h, w]`` float32 array, by PIL resample.
TORCH_RESIZE = {BILINEAR: torch_bilinear, BICUBIC: torch_bicubic}


@dataclass
class DepthProProcessor:
    """transformers' ``DepthProImageProcessor``: rescale and normalise first (float32, fused as
    transformers fuses them), then PyTorch's interpolation (``resample``: bilinear or bicubic,
    no antialiasing) to ``size``. Its post-processing (:meth:`post_process`) owns the depth."""

    settings: ImageSettings

    @classmethod
    def from_dict(cls, raw: dict) -> DepthProProcessor:
        settings = sized_settings(raw, "Depth Pro", BILINEAR, 1536)
        if settings.resample not in TORCH_RESIZE:
            raise MobiusError(
                f"Depth Pro's image processor: resample {settings.resample} is not bilinear (2) "
                "or bicubic (3)"
            )
        return cls(settings)

    def resize(self, maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """``[c, h, w]`` float32 maps resized to ``size`` by the processor's ``resample``."""
        return TORCH_RESIZE[self.settings.resample](maps, size)

    def __call__(self, image) -> np.ndarray:
        """One image (a path, a PIL image or a uint8 array) as float32 ``[3, height, width]``."""
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        pixels, settings = to_chw(image), self.settings
        if settings.do_rescale and settings.do_normalize:
            scale = np.float32(1.0 / settings.rescale_factor)
            mean = np.asarray(settings.image_mean, np.float32)[:, None, None] * scale
            std = np.asarray(settings.image_std, np.float32)[:, None, None] * scale
            pixels = (pixels.astype(np.float32) - mean) / std
        else:
            pixels = settings.finish(pixels)
        if settings.do_resize:
            pixels = self.resize(pixels, (settings.size["height"], settings.size["width"]))
        return pixels

    def post_process(self, outputs: dict, size: tuple[int, int]) -> DepthEstimate:
        """``post_process_depth_estimation``: with a field of view, the inverse depth times
        ``width / focal_length`` (``focal_length = width / 2 / tan(fov / 2)``); resized to
        ``size``; then depth ``1 / clip(inverse, 1e-4, 1e4)``."""
        depth = outputs["predicted_depth"].astype(np.float32)
        fov = outputs.get("field_of_view")
        focal = None
        if fov is not None:
            width = np.float32(size[1])
            focal = np.float32(0.5 * size[1]) / np.tan(np.float32(0.5) * np.deg2rad(fov))
            depth = depth * width / focal
        depth = self.resize(depth[None], size)[0]
        depth = np.float32(1) / np.clip(depth, np.float32(1e-4), np.float32(1e4))
        return DepthEstimate(
            depth, None if fov is None else float(fov), None if focal is None else float(focal)
        )


@dataclass
class ZoeDepthProcessor(DptProcessor):
    """transformers' ``ZoeDepthImageProcessor`` (PIL backend): rescale, reflect pad
    (:mod:`~mobius_vision.processing.zoedepth`), DPT's aspect-kept resize of the padded image
    with PyTorch's bilinear ``align_corners=True``, normalise. ``ensure_multiple_of`` may be
    a fraction (transformers' default is 1/32)."""

    ensure_multiple_of: float = 1 / 32
    do_pad: bool = True

    @classmethod
    def from_dict(cls, raw: dict) -> ZoeDepthProcessor:
        settings = sized_settings(
            {"size": {"height": 384, "width": 512}, **raw}, "ZoeDepth", BILINEAR, 384
        )
        if settings.do_resize and settings.resample != BILINEAR:
            raise MobiusError(
                f"ZoeDepth's image processor: resample {settings.resample} is not built "
                "(bilinear, 2, is)"
            )
        multiple = raw.get("ensure_multiple_of", 1 / 32)
        if (
            isinstance(multiple, bool)
            or not isinstance(multiple, (int, float))
            or not (math.isfinite(multiple) and 0 < multiple <= 1 << 12)
        ):
            raise MobiusError(
                f"preprocessor setting ensure_multiple_of must be a number in (0, 4096], "
                f"got {multiple!r}"
            )
        return cls(
            settings,
            keep_aspect_ratio=flag(raw, "keep_aspect_ratio", True),
            ensure_multiple_of=multiple,
            do_pad=flag(raw, "do_pad", True),
        )

    def constrain(self, value: float) -> int:
        side = constrain_to_multiple(value, self.ensure_multiple_of)
        if side <= 0:
            raise MobiusError(f"the image is too small: a side of {value:g} pixels rounds to 0")
        return side

    def __call__(self, image) -> np.ndarray:
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        pixels, settings = to_chw(image), self.settings
        if settings.do_rescale:
            pixels = rescale(pixels, settings.rescale_factor)
        pixels = pixels.astype(np.float32, copy=False)
        if self.do_pad:
            pixels = reflect_pad(pixels)
        if settings.do_resize:
            pixels = bilinear_align_corners(pixels, self.target_size(image_size(pixels)))
        if settings.do_normalize:
            pixels = normalize(pixels, settings.image_mean, settings.image_std)
        return pixels.astype(np.float32, copy=False)

    def post_process(self, outputs: dict, size: tuple[int, int]) -> DepthEstimate:
        """``post_process_depth_estimation``: resized to the padded image, the padding off."""
        return DepthEstimate(remove_padding(outputs["predicted_depth"], size, self.do_pad))


#: transformers' image processor classes mobius depth reproduces.
PROCESSORS = {
    "DPTImageProcessor": DptProcessor.from_dict,
    "GLPNImageProcessor": GlpnProcessor.from_dict,
    "PromptDepthAnythingImageProcessor": PromptDepthProcessor.from_dict,
    "DepthProImageProcessor": DepthProProcessor.from_dict,
    "ZoeDepthImageProcessor": ZoeDepthProcessor.from_dict,
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
        return self.outputs(pixels, prompt)["predicted_depth"]

    def outputs(self, pixels: np.ndarray, prompt: np.ndarray | None = None) -> dict:
        """Every graph output of one image, by name, its batch dimension dropped (float32)."""
        for got, want in zip(pixels.shape, self.pixel_shape, strict=True):
            if isinstance(want, int) and got != want:
                raise PackageError(
                    f"the image processor of {self.package_dir} makes {list(pixels.shape)} "
                    f"pixels; its graph takes {self.pixel_shape}"
                )
        feed = {"pixel_values": pixels[None].astype(self.pixel_type)}
        if prompt is not None:
            feed["prompt_depth"] = prompt.astype(self.pixel_type)
        names = [output.name for output in self.session.get_outputs()]
        values = self.session.run(names, feed)
        return {
            name: np.asarray(value[0], np.float32)
            for name, value in zip(names, values, strict=True)
        }

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
        return self.estimate(image, prompt_path).depth

    def estimate(self, image, prompt_path: str | os.PathLike | None = None) -> DepthEstimate:
        """:meth:`depth`, with Depth Pro's field of view and focal length where it has them."""
        self.check_prompt(prompt_path)
        if isinstance(image, (str, os.PathLike)):
            image = load_image(image)
        size = image_size(to_chw(image))
        prompt = None if prompt_path is None else self.processor.prompt(prompt_path)
        outputs = self.outputs(self.processor(image), prompt)
        if isinstance(self.processor, (DepthProProcessor, ZoeDepthProcessor)):  # their own
            return self.processor.post_process(outputs, size)
        return DepthEstimate(torch_bicubic(outputs["predicted_depth"][None], size)[0])


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
        estimate = estimator.estimate(path, prompt)
        depth = estimate.depth
        target = Path(png) if png else default_png(path)
        Image.fromarray(depth_png(depth)).save(target, format="PNG")
        if raw:
            np.save(raw, depth)
        saved = f"{target}" + (f", {raw}" if raw else "")
        fov = ""
        if estimate.field_of_view is not None:
            fov = (
                f", field of view {estimate.field_of_view:.6g} degrees "
                f"(focal length {estimate.focal_length:.6g} px)"
            )
        print(f"{path}: depth min {depth.min():.6g} max {depth.max():.6g}{fov} -> {saved}")
    return 0
