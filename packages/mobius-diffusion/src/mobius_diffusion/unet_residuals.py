"""Which residual inputs a pipeline's UNet is built with: a ControlNet's, a T2I-Adapter's, or none.

A ``StableDiffusion(XL)ControlNetPipeline`` lists a ``controlnet`` component, a
``StableDiffusion(XL)AdapterPipeline`` an ``adapter``; their ``unet`` must then take
what that component outputs, so the whole-pipeline build sets ``--unet-residuals``
(:data:`~mobius_diffusion.tasks.UNET_RESIDUALS_OPTION`) for the ``unet`` alone.
"""

from __future__ import annotations

from mobius.errors import ConfigError
from mobius_diffusion.tasks import UNET_RESIDUALS, UNET_RESIDUALS_OPTION


def residuals_plugin(plugin: dict, component: str, built: set[str]) -> dict:
    """The plugin options of pipeline component ``component``, ``--unet-residuals`` set or dropped.

    ``built`` names the pipeline's components being built. The ``unet`` takes the
    residuals of the ``controlnet`` or ``adapter`` among them (else the user's
    choice); no other component reads the option, so it is dropped for them.

    Raises:
        ConfigError: a pipeline with both a controlnet and an adapter, or a
            ``--unet-residuals`` that contradicts the pipeline's component.
    """
    options = {k: v for k, v in plugin.items() if k != UNET_RESIDUALS_OPTION}
    if component != "unet":
        return options
    kinds = [kind for kind in UNET_RESIDUALS if kind in built]
    given = plugin.get(UNET_RESIDUALS_OPTION)
    if len(kinds) > 1:
        raise ConfigError("a pipeline with both a controlnet and an adapter is not built by mobius")
    if kinds and given not in (None, kinds[0]):
        raise ConfigError(
            f"--unet-residuals {given}: this pipeline's unet takes its {kinds[0]}'s residuals"
        )
    chosen = kinds[0] if kinds else given
    return {**options, UNET_RESIDUALS_OPTION: chosen} if chosen else options
