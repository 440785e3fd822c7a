"""One file per architecture family, named after the HF ``model_type``."""
