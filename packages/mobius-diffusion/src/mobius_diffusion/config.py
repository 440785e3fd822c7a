"""A diffusers component's ``config.json`` as the config object a family's ``from_hf`` reads."""

from __future__ import annotations

from typing import Any

#: Per-level list fields a class marks "none" with -1 (Stable Cascade: no attention at that
#: level); they read as null, which core's size checks skip.
NONE_MARKERS = {"StableCascadeUNet": ("num_attention_heads",)}


class ComponentConfig:
    """A diffusers component's ``config.json`` read as attributes (``config.block_out_channels``).

    diffusers saves every constructor argument of a component, so a family's config
    dataclass reads the fields it needs and refuses what it does not build. The
    component's class (``_class_name``) is its ``model_type``: the registry key.
    Lists stay lists; a missing field reads as ``AttributeError`` (use ``getattr``
    with the diffusers default for fields older configs lack).
    """

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)
        self.model_type = fields["_class_name"]
        for name in NONE_MARKERS.get(self.model_type, ()):
            values = fields.get(name)
            if isinstance(values, list):  # core checks sizes: -1 is no size but "none"
                setattr(self, name, [None if v == -1 else v for v in values])

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``model_type`` included."""
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"ComponentConfig({self.model_type})"
