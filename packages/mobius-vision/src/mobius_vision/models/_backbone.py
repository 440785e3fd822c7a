"""Backbones for the dense heads (detection, segmentation, depth), found through the registry.

A head family (DPT, Depth Anything, UperNet, DETR...) names its backbone in
``backbone_config``, as transformers' ``load_backbone`` reads it. Its module is the
``backbone_class`` of whatever mobius registers for that config's ``model_type``
(DINOv2's, Swin's, ConvNeXt's, ResNet's...), so the head reuses a verified encoder
instead of copying it. A backbone module returns what transformers'
``XxxBackbone(...).feature_maps`` holds: one ``[batch, channels, height, width]`` map
per entry of ``out_features``, in that order.
"""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius import registry
from mobius.components import module_scope
from mobius.errors import ConfigError


def backbone(model_type: str, config: Any, *, any_size: bool = False) -> nn.Module:
    """The backbone module mobius registers for ``model_type``, built from ``config``.

    ``config`` is whatever that family's ``backbone_class`` takes (usually its own
    config dataclass made from the head's ``backbone_config``). ``any_size``: for a head
    whose graph takes any image size, the family's ``any_size_backbone_class()`` where it has
    one (Swin's: its ``backbone_class`` is built for one size; a convolutional family's
    ``backbone_class`` takes any size already).
    """
    top = registry.get(model_type).module_class()
    backbone_class = getattr(top, "backbone_class", None)
    if backbone_class is None:
        raise ConfigError(f"{model_type} is not a backbone mobius can put under a dense head")
    if any_size and hasattr(top, "any_size_backbone_class"):
        backbone_class = top.any_size_backbone_class()
    return backbone_class(config)


def staged_feature_maps(op, backbone: nn.Module, pixel_values, out_features) -> list:
    """A convolutional backbone's ``feature_maps``: its ``embedder`` (the ``stem`` map), then
    each of ``encoder.stages`` (``stage1``, ``stage2``...), those ``out_features`` names, in
    its order (transformers' ResNet-style ``XxxBackbone``)."""
    hidden = backbone.embedder(op, pixel_values)
    maps = {"stem": hidden}
    with module_scope(op, backbone.encoder):  # each stage's output, under the encoder's names
        for index, stage in enumerate(backbone.encoder.stages, start=1):
            hidden = stage(op, hidden)
            maps[f"stage{index}"] = hidden
    return [maps[name] for name in out_features]
