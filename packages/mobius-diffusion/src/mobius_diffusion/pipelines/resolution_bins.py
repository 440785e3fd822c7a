"""Resolution binning: the trained sizes a PixArt or Sana transformer makes, by aspect ratio.

diffusers' PixArt and Sana pipelines (``use_resolution_binning``, their default) make
the image at the trained size whose aspect ratio (height / width) is nearest the one
asked for, then resize and centre-crop the decoded image to the asked size. The
tables are diffusers' (``ASPECT_RATIO_{512,1024,2048,4096}_BIN``), by the
transformer's ``sample_size`` (16, 32, 64, 128 latent pixels: 512 to 4096-pixel
models), ratio -> ``(height, width)``, in diffusers' order (a tie goes to the first).
"""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError

ASPECT_RATIO_512_BIN = {
    "0.25": (256, 1024),
    "0.28": (256, 928),
    "0.32": (288, 896),
    "0.33": (288, 864),
    "0.35": (288, 832),
    "0.4": (320, 800),
    "0.42": (320, 768),
    "0.48": (352, 736),
    "0.5": (352, 704),
    "0.52": (352, 672),
    "0.57": (384, 672),
    "0.6": (384, 640),
    "0.68": (416, 608),
    "0.72": (416, 576),
    "0.78": (448, 576),
    "0.82": (448, 544),
    "0.88": (480, 544),
    "0.94": (480, 512),
    "1.0": (512, 512),
    "1.07": (512, 480),
    "1.13": (544, 480),
    "1.21": (544, 448),
    "1.29": (576, 448),
    "1.38": (576, 416),
    "1.46": (608, 416),
    "1.67": (640, 384),
    "1.75": (672, 384),
    "2.0": (704, 352),
    "2.09": (736, 352),
    "2.4": (768, 320),
    "2.5": (800, 320),
    "3.0": (864, 288),
    "4.0": (1024, 256),
}
ASPECT_RATIO_1024_BIN = {
    "0.25": (512, 2048),
    "0.28": (512, 1856),
    "0.32": (576, 1792),
    "0.33": (576, 1728),
    "0.35": (576, 1664),
    "0.4": (640, 1600),
    "0.42": (640, 1536),
    "0.48": (704, 1472),
    "0.5": (704, 1408),
    "0.52": (704, 1344),
    "0.57": (768, 1344),
    "0.6": (768, 1280),
    "0.68": (832, 1216),
    "0.72": (832, 1152),
    "0.78": (896, 1152),
    "0.82": (896, 1088),
    "0.88": (960, 1088),
    "0.94": (960, 1024),
    "1.0": (1024, 1024),
    "1.07": (1024, 960),
    "1.13": (1088, 960),
    "1.21": (1088, 896),
    "1.29": (1152, 896),
    "1.38": (1152, 832),
    "1.46": (1216, 832),
    "1.67": (1280, 768),
    "1.75": (1344, 768),
    "2.0": (1408, 704),
    "2.09": (1472, 704),
    "2.4": (1536, 640),
    "2.5": (1600, 640),
    "3.0": (1728, 576),
    "4.0": (2048, 512),
}
ASPECT_RATIO_2048_BIN = {
    "0.25": (1024, 4096),
    "0.26": (1024, 3968),
    "0.27": (1024, 3840),
    "0.28": (1024, 3712),
    "0.32": (1152, 3584),
    "0.33": (1152, 3456),
    "0.35": (1152, 3328),
    "0.4": (1280, 3200),
    "0.42": (1280, 3072),
    "0.48": (1408, 2944),
    "0.5": (1408, 2816),
    "0.52": (1408, 2688),
    "0.57": (1536, 2688),
    "0.6": (1536, 2560),
    "0.68": (1664, 2432),
    "0.72": (1664, 2304),
    "0.78": (1792, 2304),
    "0.82": (1792, 2176),
    "0.88": (1920, 2176),
    "0.94": (1920, 2048),
    "1.0": (2048, 2048),
    "1.07": (2048, 1920),
    "1.13": (2176, 1920),
    "1.21": (2176, 1792),
    "1.29": (2304, 1792),
    "1.38": (2304, 1664),
    "1.46": (2432, 1664),
    "1.67": (2560, 1536),
    "1.75": (2688, 1536),
    "2.0": (2816, 1408),
    "2.09": (2944, 1408),
    "2.4": (3072, 1280),
    "2.5": (3200, 1280),
    "2.89": (3328, 1152),
    "3.0": (3456, 1152),
    "3.11": (3584, 1152),
    "3.62": (3712, 1024),
    "3.75": (3840, 1024),
    "3.88": (3968, 1024),
    "4.0": (4096, 1024),
}
ASPECT_RATIO_4096_BIN = {
    "0.25": (2048, 8192),
    "0.26": (2048, 7936),
    "0.27": (2048, 7680),
    "0.28": (2048, 7424),
    "0.32": (2304, 7168),
    "0.33": (2304, 6912),
    "0.35": (2304, 6656),
    "0.4": (2560, 6400),
    "0.42": (2560, 6144),
    "0.48": (2816, 5888),
    "0.5": (2816, 5632),
    "0.52": (2816, 5376),
    "0.57": (3072, 5376),
    "0.6": (3072, 5120),
    "0.68": (3328, 4864),
    "0.72": (3328, 4608),
    "0.78": (3584, 4608),
    "0.82": (3584, 4352),
    "0.88": (3840, 4352),
    "0.94": (3840, 4096),
    "1.0": (4096, 4096),
    "1.07": (4096, 3840),
    "1.13": (4352, 3840),
    "1.21": (4352, 3584),
    "1.29": (4608, 3584),
    "1.38": (4608, 3328),
    "1.46": (4864, 3328),
    "1.67": (5120, 3072),
    "1.75": (5376, 3072),
    "2.0": (5632, 2816),
    "2.09": (5888, 2816),
    "2.4": (6144, 2560),
    "2.5": (6400, 2560),
    "2.89": (6656, 2304),
    "3.0": (6912, 2304),
    "3.11": (7168, 2304),
    "3.62": (7424, 2048),
    "3.75": (7680, 2048),
    "3.88": (7936, 2048),
    "4.0": (8192, 2048),
}

#: The table of a transformer by its ``sample_size``.
BINS_BY_SAMPLE_SIZE = {
    16: ASPECT_RATIO_512_BIN,
    32: ASPECT_RATIO_1024_BIN,
    64: ASPECT_RATIO_2048_BIN,
    128: ASPECT_RATIO_4096_BIN,
}


def binned_size(height: int, width: int, sample_size: int) -> tuple[int, int]:
    """The trained ``(height, width)`` whose aspect ratio is nearest ``height / width``.

    Raises:
        ConfigError: a ``sample_size`` with no table (diffusers refuses it too).
    """
    bins = BINS_BY_SAMPLE_SIZE.get(sample_size)
    if bins is None:
        raise ConfigError(
            f"resolution binning has tables for transformers of sample_size "
            f"{', '.join(map(str, BINS_BY_SAMPLE_SIZE))}, not {sample_size}; turn it off"
        )
    ratio = height / width
    nearest = min(bins, key=lambda key: abs(float(key) - ratio))
    return bins[nearest]


def resize_and_crop(images: np.ndarray, height: int, width: int) -> np.ndarray:
    """``[batch, channels, H, W]`` scaled (bilinear, half-pixel centres, no antialiasing) until it
    covers ``height`` x ``width``, then centre-cropped to it: diffusers' ``resize_and_crop_tensor``."""
    old_height, old_width = images.shape[2:]
    if (old_height, old_width) == (height, width):
        return images
    scale = max(height / old_height, width / old_width)
    new_height, new_width = int(old_height * scale), int(old_width * scale)
    resized = _bilinear_axis(_bilinear_axis(images, new_height, axis=2), new_width, axis=3)
    top, left = (new_height - height) // 2, (new_width - width) // 2
    return resized[:, :, top : top + height, left : left + width]


def _bilinear_axis(x: np.ndarray, size: int, axis: int) -> np.ndarray:
    """Linear interpolation along one axis to ``size`` samples, as torch's ``interpolate``
    (``align_corners=False``): source ``(i + 0.5) * in / out - 0.5``, clamped at 0."""
    length = x.shape[axis]
    source = (np.arange(size, dtype=np.float32) + 0.5) * np.float32(length / size) - 0.5
    source = np.maximum(source, 0)
    low = np.minimum(np.floor(source).astype(np.int64), length - 1)
    high = np.minimum(low + 1, length - 1)
    weight = (source - low).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = size
    weight = weight.reshape(shape)
    return np.take(x, low, axis=axis) * (1 - weight) + np.take(x, high, axis=axis) * weight
