"""The pipeline runners, one module per diffusers pipeline family.

:mod:`mobius_diffusion.pipeline` is the public face (``open_pipeline``, ``to_pil``
and every runner class); :mod:`.base` holds what the runners share.
"""
