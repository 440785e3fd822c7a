"""VideoLLaMA3 images: Qwen2-VL's patch path, unmerged, with SigLIP's normalisation.

``VideoLlama3ImageProcessor`` is ``Qwen2VLImageProcessor`` with mean and std 0.5, a
``temporal_patch_size`` of 1 and a ``merge_size`` of 1 (one token per patch), and adds
``image_merge_sizes`` to its outputs; ``VideoLlama3Processor`` expands ``<|image_pad|>``
to one token per patch and its model counts positions plainly, as HyperCLOVA X's does
(:class:`~.hyperclovax_vision_v2.HyperCLOVAXVisionV2Processor`). The graphs mobius builds
take unmerged images only: a package whose image processor merges is refused.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius_vision.processing._image import BICUBIC
from mobius_vision.processing.hyperclovax_vision_v2 import HyperCLOVAXVisionV2Processor


class VideoLlama3Processor(HyperCLOVAXVisionV2Processor):
    """Unmerged patches, one token each, and ``image_merge_sizes``."""

    image_defaults = dict(resample=BICUBIC, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))
    default_merge_size, default_temporal_patch_size = 1, 1

    def __call__(self, text: str, images: list) -> dict[str, np.ndarray]:
        if self.merge_size != 1:
            raise MobiusError(
                f"this VideoLLaMA3 package's image processor merges {self.merge_size}x"
                f"{self.merge_size} patches; mobius builds VideoLLaMA3 for unmerged images "
                "(merge_size 1) only"
            )
        inputs = super().__call__(text, images)
        if "image_grid_thw" in inputs:
            inputs["image_merge_sizes"] = np.ones(len(inputs["image_grid_thw"]), np.int64)
        return inputs
