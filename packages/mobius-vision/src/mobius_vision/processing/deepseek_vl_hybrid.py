"""DeepSeek-VL hybrid's images: each image twice. ``high_res_pixel_values``: DeepSeek-VL's
square at ``high_res_size`` (1024) with the ``high_res_*`` resample, mean and std; then
``pixel_values``: that uint8 square resized again to ``size`` (384), with its own mean and
std. Without ``do_resize`` both are the image as it is (no padding either)."""

from __future__ import annotations

import numpy as np

from mobius_vision.processing._image import ImageSettings
from mobius_vision.processing._tiles import GOT_OCR2_DEFAULTS
from mobius_vision.processing.deepseek_vl import DeepseekVLProcessor

#: The settings both resolutions share; the rest the high one reads from ``high_res_<name>``.
SHARED = ("do_resize", "do_rescale", "rescale_factor", "do_normalize", "do_pad", "min_size")
HIGH_RES_DEFAULTS = dict(GOT_OCR2_DEFAULTS, size={"height": 1024, "width": 1024})


class DeepseekVLHybridProcessor(DeepseekVLProcessor):
    """DeepseekVLHybridProcessor: ``pixel_values`` and ``high_res_pixel_values`` per image."""

    def high_res_settings(self) -> ImageSettings:
        """The high-resolution image's settings, from the image processor's ``high_res_*``."""
        raw = self.image.raw
        fields = {name: raw[name] for name in SHARED if name in raw}
        for name in ("size", "resample", "image_mean", "image_std"):
            if raw.get(f"high_res_{name}") is not None:
                fields[name] = raw[f"high_res_{name}"]
        return ImageSettings.from_dict(fields, **HIGH_RES_DEFAULTS)

    def pixel_inputs(self, images: list[np.ndarray]) -> dict[str, np.ndarray]:
        high_settings, low_settings = self.high_res_settings(), self.image
        low, high = [], []
        for image in images:
            if low_settings.do_resize:
                image = self.square(image, high_settings)
                high.append(high_settings.finish(image))
                low.append(low_settings.finish(self.square(image, low_settings)))
            else:
                high.append(high_settings.finish(image))
                low.append(low_settings.finish(image))
        return {"pixel_values": np.stack(low), "high_res_pixel_values": np.stack(high)}
