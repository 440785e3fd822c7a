"""One file per diffusers component family, each with a ``MODEL_TYPES`` table."""
