"""mobius-diffusion: diffusion models: VAE, UNet, DiT/MMDiT/Flux transformers.

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import. No model
type is registered until it passes parity against its reference implementation.
"""

__version__ = "0.1.0"

PACKAGE = "mobius-diffusion"

# key -> (module class "module:Class", task). Empty until a model is verified.
MODELS: dict[str, tuple[str, str]] = {}


def register(registry) -> None:
    """Add mobius-diffusion's architectures to ``registry``; calling it again changes nothing."""
    for key, (module, task) in MODELS.items():
        registry.register(key, module, task=task, package=PACKAGE)
