"""One file per audio architecture family, each with a ``MODEL_TYPES`` table."""
