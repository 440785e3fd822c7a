"""SkyReels-V2 text to video: Wan 2.1's pipeline around the SkyReels-V2 transformer."""

from __future__ import annotations

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.wan import WanRunner


class SkyReelsV2Runner(WanRunner):
    """``SkyReelsV2Pipeline``: :class:`WanRunner`'s steps (masked T5/UMT5 states, the hub's
    UniPC flow sigmas, the Wan VAE) with SkyReels' defaults: guidance 6, 97 frames of
    544 x 960.

    diffusers runs the conditional and unconditional passes one after the other; the runner
    batches them, which changes nothing but the float rounding. A transformer with the
    diffusion-forcing pipelines' fps embedding (``inject_sample_info``) or per-frame timesteps
    (``diffusion_forcing``) is refused: this pipeline passes neither.
    """

    default_guidance_scale = 6.0
    default_num_frames, default_height, default_width = 97, 544, 960

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        transformer = self.config("transformer")
        for field in ("inject_sample_info", "diffusion_forcing"):
            if transformer.get(field):
                raise ConfigError(
                    f"{self.package_dir}: a SkyReelsV2Pipeline's transformer has {field}, "
                    "which only the diffusion-forcing pipelines feed"
                )
