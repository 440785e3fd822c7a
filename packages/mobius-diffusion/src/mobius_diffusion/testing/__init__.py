"""mobius-diffusion's parity kit (needs torch and diffusers: test-only).

A tiny diffusers component is made from a config, every parameter perturbed,
saved with ``save_pretrained``, built with the CLI path, and each graph run in
ONNX Runtime beside the diffusers call it stands for (:func:`check_diffusion_parity`;
each registered class's call: :data:`DIFFUSERS_CALLS`).
"""

from mobius_diffusion.testing._parity import (
    DiffusionParity,
    check_diffusion_parity,
    compare_graph,
    make_random_diffusers_model,
)
from mobius_diffusion.testing._references import DIFFUSERS_CALLS

__all__ = [
    "DIFFUSERS_CALLS",
    "DiffusionParity",
    "check_diffusion_parity",
    "compare_graph",
    "make_random_diffusers_model",
]
