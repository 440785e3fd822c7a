"""One file per vision architecture family, each with a ``MODEL_TYPES`` table."""
