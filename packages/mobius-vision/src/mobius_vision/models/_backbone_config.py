"""What the backbones under dense heads share: their config, stage names and output norms.

A head's ``backbone_config`` (transformers' ``ConvNextConfig``, ``SwinConfig``... with
``out_features``) becomes the ``config_class`` of that family's ``backbone_class``
(:mod:`mobius_vision.models._backbone`), built at the head's image size
(:func:`backbone_config`). The backbones name their outputs as transformers does
(:func:`stage_names`) and normalise each with its own norm (:class:`StageNorms`).
"""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius import registry
from mobius.errors import ConfigError


def backbone_config(hf_backbone_config: Any, image_size: tuple[int, int] | None = None) -> Any:
    """The normalised config of ``hf_backbone_config``'s backbone (``image_size`` set if given)."""
    model_type = getattr(hf_backbone_config, "model_type", None)
    top = registry.get(model_type).module_class()
    backbone_class = getattr(top, "backbone_class", None)
    if backbone_class is None:
        raise ConfigError(f"{model_type} is not a backbone mobius can put under a dense head")
    config = backbone_class.config_class.from_hf(hf_backbone_config)
    if image_size is not None:
        import dataclasses

        config = dataclasses.replace(config, image_size=tuple(image_size))
    return config


def stage_names(stages: int) -> list[str]:
    """transformers' names of a backbone's outputs: ``stem``, then ``stage1``, ``stage2``..."""
    return ["stem", *(f"stage{i}" for i in range(1, stages + 1))]


def require_backbone_type(hf_config: Any, model_type: str) -> None:
    """Refuse a backbone config of another family than ``model_type`` (a variant whose
    backbone mobius does not build yet)."""
    if hf_config.model_type != model_type:
        raise ConfigError(f"mobius has no {hf_config.model_type} backbone for dense heads yet")


def out_features(hf_config: Any, stages: int) -> tuple[str, ...]:
    """The checked ``out_features`` of a backbone config (default: the last stage)."""
    names = stage_names(stages)
    chosen = getattr(hf_config, "out_features", None) or names[-1:]
    if not isinstance(chosen, (list, tuple)) or not all(name in names for name in chosen):
        raise ConfigError(
            f"{hf_config.model_type} backbone: out_features {chosen!r} must name stages of {names}"
        )
    return tuple(chosen)


class StageNorms(nn.Module):
    """transformers' ``hidden_states_norms``: a norm per ``out_features`` name, each applied to
    that stage's map; called with the maps by name, it returns the normed ones in order."""

    def __init__(self, norms: dict[str, nn.Module]) -> None:
        super().__init__()
        self.names = list(norms)
        for name, norm in norms.items():
            setattr(self, name, norm)

    def forward(self, op, maps: dict) -> list:
        return [getattr(self, name)(op, maps[name]) for name in self.names]
