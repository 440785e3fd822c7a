"""mobius-diffusion: diffusion models: VAE, UNet, DiT/MMDiT/Flux transformers, ControlNet, adapters.

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import. Each model
file in ``mobius_diffusion.models`` declares the diffusers ``_class_name`` keys it
builds in a ``MODEL_TYPES`` table, next to the classes themselves. A component's
``config.json`` is read as it is (:class:`mobius._config.ComponentConfig`):
diffusers is not needed to build.
"""

from __future__ import annotations

from mobius.discovery import discover_model_types, register_model_types

__version__ = "0.1.0"

PACKAGE = "mobius-diffusion"

# Model files that failed to import: file name -> error. Their types are not registered.
LOAD_ERRORS: dict[str, str] = {}


def model_types() -> dict[str, type]:
    """Every diffusers class this package builds, mapped to its module class."""
    from mobius_diffusion import models

    return discover_model_types(models, LOAD_ERRORS)


def register(registry) -> None:
    """Add mobius-diffusion's architectures to ``registry``; calling it again changes nothing."""
    register_model_types(
        registry, PACKAGE, model_types(), LOAD_ERRORS, "mobius_diffusion:verified.json"
    )


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
